"""EfficientNet: mmdet 2.28.2's compound scaling, keys and shapes, EdgeTPU blocks, drop path
exact under every checkpoint mode (the wrapper restores the RNG for the recompute), freezing,
bad arguments."""
import pytest
import torch
from torch.nn.modules.batchnorm import _BatchNorm

from ckptzoo.models import EfficientNet
from ckptzoo.models.backbones.efficientnet import EdgeResidual, model_scaling
from ckptzoo.models.utils import Conv2dAdaptivePadding, InvertedResidual
from ckptzoo.registry import build_backbone
from tests.helpers.checkpointing import one_thread
from tests.helpers.unit_modes import assert_mode_exact, randomise_bn, train_run

one_thread = pytest.fixture(autouse=True)(one_thread)


def _model(arch='b0', **kwargs):
    torch.manual_seed(0)
    kwargs.setdefault('out_indices', (2, 3, 4))
    return randomise_bn(EfficientNet(arch, **kwargs)).double().train()


def test_b3_as_mmdets_retinanet_config_builds_it():
    """mmdet's efficientnet config: b3, out_indices (3, 4, 5), FPN in_channels 48, 136, 384."""
    model = build_backbone(dict(type='EfficientNet', arch='b3', drop_path_rate=0.2,
                                out_indices=(3, 4, 5), frozen_stages=0)).eval()
    assert len(model.layers) == 6  # the stages past out_indices and the last conv are not built
    assert [len(layer) for layer in model.layers[1:]] == [2, 3, 3, 10, 8]
    assert isinstance(model.layers[0].conv, Conv2dAdaptivePadding)
    assert model.layers[0].bn.eps == 1e-3
    with torch.no_grad():
        outs = model(torch.rand(1, 3, 65, 65))  # "SAME" padding: ceil(65 / 32) = 3
    assert [tuple(o.shape[1:]) for o in outs] == [(48, 9, 9), (136, 5, 5), (384, 3, 3)]
    keys = list(model.state_dict())
    assert keys[0] == 'layers.0.conv.weight'
    assert 'layers.1.0.se.conv1.conv.weight' in keys and 'layers.1.0.expand_conv.conv.weight' \
        not in keys and 'layers.2.0.expand_conv.conv.weight' in keys
    dpr = [b.drop_path.drop_prob for layer in model.layers[1:] for b in layer
           if not isinstance(b.drop_path, torch.nn.Identity)]
    assert dpr[0] == pytest.approx(0.2 / 25) and len(dpr) == 25  # 26 blocks, first at 0


def test_model_scaling_as_mmdet():
    """b0 keeps the table (stage 4 splits 80 / 112 and merges back); b3 widens by 1.2 and
    deepens by 1.4 (ceil) per width run: 80 x3 -> 5 and 112 x3 -> 5 merge into 10 blocks,
    192 x4 -> 6 and 320 x1 -> 2 into 8."""
    table = EfficientNet.layer_settings['b']
    b0 = model_scaling(table, EfficientNet.arch_settings['b0'])
    assert [len(x) for x in b0] == [1, 1, 2, 2, 6, 5, 1]
    b3 = model_scaling(table, EfficientNet.arch_settings['b3'])
    assert [len(x) for x in b3] == [1, 2, 3, 3, 10, 8, 1]
    assert [x[0][1] for x in b3] == [40, 24, 32, 48, 96, 232, 1536]


def test_edgetpu_arch():
    model = EfficientNet('es', out_indices=(6, ))
    assert isinstance(model.layers[1][0], EdgeResidual)
    assert isinstance(model.layers[4][0], InvertedResidual)
    assert not model.layers[2][0].with_residual  # stride 2
    with torch.no_grad():
        assert model.eval()(torch.rand(1, 3, 32, 32))[0].shape == (1, 1280, 1, 1)


def test_drop_path_is_exact_under_recompute(monkeypatch):
    """A large drop path rate drops samples (the seed matters), and each mode's recompute
    draws the same masks as the forward."""
    plain = _model(drop_path_rate=0.6)
    x = torch.randn(4, 3, 32, 32, dtype=torch.float64)
    a, b = train_run(plain, x, seed=1), train_run(plain, x, seed=2)
    assert not torch.allclose(a[0][-1], b[0][-1])
    for mode in ('full', 'selective', 'offload'):
        assert_mode_exact(plain, x, monkeypatch, mode=mode, min_calls=10, seed=1)
    assert_mode_exact(plain, x, monkeypatch, segments=[['layers.0', 'layers.4.5']], seed=1)


@pytest.mark.filterwarnings('ignore:checkpoint mode .offload.')
@pytest.mark.parametrize('mode', ['full', 'selective', 'offload'])
@pytest.mark.parametrize('arch,frozen_stages', [('b0', 0), ('b0', 2), ('es', 0)])
def test_every_mode_equals_plain(monkeypatch, mode, arch, frozen_stages):
    plain = _model(arch, frozen_stages=frozen_stages, drop_path_rate=0.2)
    assert_mode_exact(plain, torch.randn(2, 3, 32, 32, dtype=torch.float64), monkeypatch,
                      mode=mode, min_calls=8)


def test_with_cp_sets_every_unit_full():
    model = EfficientNet('b0', with_cp=True, out_indices=(6, ))
    plan = model.checkpoint_plan()
    assert list(plan)[0] == 'layers.0' and list(plan)[-1] == 'layers.6'
    assert set(plan.values()) == {'full'} and model.with_cp and model.layers[3][1].with_cp


def test_frozen_stages_and_norm_eval():
    model = _model(frozen_stages=2)
    frozen = {'.'.join(n.split('.')[:2]) for n, p in model.named_parameters()
              if not p.requires_grad}
    assert frozen == {'layers.0', 'layers.1'}
    assert not model.layers[1][0].depthwise_conv.bn.training
    assert model.layers[2][0].depthwise_conv.bn.training
    model = _model(norm_eval=True)
    assert not any(m.training for m in model.modules() if isinstance(m, _BatchNorm))


@pytest.mark.parametrize('kwargs,match', [
    (dict(arch='b9'), r'"b9" is not one of the arch_settings \(b0, b1'),
    (dict(out_indices=(7, )), r'out_indices must be layer indices in 0\.\.6'),
    (dict(frozen_stages=-1), r'frozen_stages must be an int in 0\.\.7'),
    (dict(drop_path_rate=1.0), r'drop_path_rate must be in \[0, 1\)'),
    (dict(with_cp=[True]), 'with_cp must be a bool'),
])
def test_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        EfficientNet(**kwargs)
