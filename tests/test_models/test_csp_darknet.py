"""CSPDarknet (YOLOX): mmdet 2.28.2's widths, depths, keys and shapes, Focus and SPP, every
checkpoint mode exact, freezing, bad arguments."""
import pytest
import torch
from torch.nn.modules.batchnorm import _BatchNorm

from ckptzoo.models import CSPDarknet
from ckptzoo.models.backbones.csp_darknet import Focus
from ckptzoo.models.utils import DepthwiseSeparableConvModule
from ckptzoo.registry import build_backbone
from tests.helpers.checkpointing import one_thread
from tests.helpers.unit_modes import assert_mode_exact, randomise_bn

one_thread = pytest.fixture(autouse=True)(one_thread)


def _tiny(**kwargs):
    torch.manual_seed(0)
    kwargs.setdefault('out_indices', (2, 3, 4))
    return randomise_bn(CSPDarknet(deepen_factor=0.33, widen_factor=0.125, **kwargs)) \
        .double().train()


def test_yolox_s_as_mmdet():
    model = build_backbone(dict(type='CSPDarknet', deepen_factor=0.33, widen_factor=0.5)).eval()
    assert [len(getattr(model, f'stage{i}')[-1].blocks) for i in range(1, 5)] == [1, 3, 3, 1]
    assert model.stem.conv.conv.in_channels == 12 and model.stem.conv.bn.momentum == 0.03
    assert list(model.stage4[1].state_dict())[:2] == ['conv1.conv.weight', 'conv1.bn.weight']
    keys = list(model.state_dict())
    assert 'stage1.1.main_conv.conv.weight' in keys and 'stage4.2.blocks.0.conv2.conv.weight' \
        in keys and 'stage4.1.conv2.conv.weight' in keys
    with torch.no_grad():
        outs = model(torch.rand(1, 3, 64, 64))
    assert [tuple(o.shape[1:]) for o in outs] == [(128, 8, 8), (256, 4, 4), (512, 2, 2)]
    p6 = CSPDarknet(arch='P6', widen_factor=0.125, deepen_factor=0.33, out_indices=(5, ))
    assert p6.stage5[1].conv2.conv.out_channels == 128


def test_focus_stacks_pixel_phases_in_mmdets_order():
    focus = Focus(1, 4, kernel_size=1)
    x = torch.arange(16.).reshape(1, 1, 4, 4)
    seen = []
    focus.conv.register_forward_pre_hook(lambda m, a: seen.append(a[0]))
    focus(x)
    assert seen[0][0, :, 0, 0].tolist() == [0., 4., 1., 5.]  # tl, bl, tr, br


def test_depthwise_and_units():
    model = CSPDarknet(deepen_factor=0.33, widen_factor=0.125, use_depthwise=True)
    assert isinstance(model.stage1[0], DepthwiseSeparableConvModule)
    assert isinstance(model.stage1[1].blocks[0].conv2, DepthwiseSeparableConvModule)
    assert list(model.checkpoint_units()) == [
        'stem', 'stage1.0', 'stage1.1', 'stage2.0', 'stage2.1', 'stage3.0', 'stage3.1',
        'stage4.0', 'stage4.1', 'stage4.2']


@pytest.mark.filterwarnings('ignore:checkpoint mode .offload.')
@pytest.mark.parametrize('mode', ['full', 'selective', 'offload'])
@pytest.mark.parametrize('frozen_stages,depthwise', [(-1, False), (1, False), (-1, True)])
def test_every_mode_equals_plain(monkeypatch, mode, frozen_stages, depthwise):
    plain = _tiny(frozen_stages=frozen_stages, use_depthwise=depthwise)
    assert_mode_exact(plain, torch.randn(2, 3, 32, 32, dtype=torch.float64), monkeypatch,
                      mode=mode, min_calls=6)


def test_with_cp_and_segments_equal_plain(monkeypatch):
    plain = _tiny()
    model = _tiny(with_cp=True, cp_use_reentrant=True)
    assert set(model.checkpoint_plan().values()) == {'full'} and model.with_cp
    model.load_state_dict(plain.state_dict())
    from tests.helpers.unit_modes import Counting, assert_same, train_run
    x = torch.randn(2, 3, 32, 32, dtype=torch.float64)
    ref = train_run(plain, x)
    counting = Counting(monkeypatch)
    assert_same(ref, train_run(model, x))
    assert counting.calls >= 10
    assert_mode_exact(plain, x, monkeypatch, segments=[['stem', 'stage3.1'],
                                                       ['stage4.0', 'stage4.2']])


def test_frozen_stages_and_norm_eval():
    model = _tiny(frozen_stages=1)
    frozen = {n.split('.')[0] for n, p in model.named_parameters() if not p.requires_grad}
    assert frozen == {'stem', 'stage1'}
    assert not model.stage1[1].main_conv.bn.training and model.stage2[0].bn.training
    model = _tiny(norm_eval=True)
    assert not any(m.training for m in model.modules() if isinstance(m, _BatchNorm))


@pytest.mark.parametrize('kwargs,match', [
    (dict(arch='P7'), "arch must be one of P5, P6, got 'P7'"),
    (dict(out_indices=(5, )), r'out_indices must be stage indices in 0\.\.4'),
    (dict(frozen_stages=5), r'frozen_stages must be an int in -1\.\.4'),
    (dict(with_cp=(True, )), 'with_cp must be a bool'),
])
def test_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        CSPDarknet(**kwargs)
