"""Darknet-53 (YOLOv3): mmdet 2.28.2's keys and shapes, every checkpoint mode exact, freezing
(mmdet's count: ``frozen_stages=k`` freezes the first k of conv1 and the blocks), bad
arguments."""
import pytest
import torch
from torch.nn.modules.batchnorm import _BatchNorm

from ckptzoo.models import Darknet
from ckptzoo.registry import build_backbone
from tests.helpers.checkpointing import one_thread
from tests.helpers.unit_modes import assert_mode_exact, randomise_bn

one_thread = pytest.fixture(autouse=True)(one_thread)


def _small(**kwargs):
    """Darknet-53 itself (the only depth) in float64: ~40M parameters, 32 px input."""
    torch.manual_seed(0)
    kwargs.setdefault('norm_eval', False)
    return randomise_bn(Darknet(**kwargs)).double().train()


def test_keys_and_shapes_as_mmdet():
    model = build_backbone(dict(type='Darknet', depth=53, out_indices=(3, 4, 5))).eval()
    keys = list(model.state_dict())
    assert keys[0] == 'conv1.conv.weight' and 'conv_res_block1.conv.conv.weight' in keys
    assert 'conv_res_block5.res3.conv2.bn.running_var' in keys
    assert 'conv_res_block5.res4.conv1.conv.weight' not in keys
    assert isinstance(model.conv1.activate, torch.nn.LeakyReLU)
    assert model.conv1.activate.negative_slope == 0.1 and model.norm_eval
    with torch.no_grad():
        outs = model(torch.rand(1, 3, 64, 64))
    assert [tuple(o.shape[1:]) for o in outs] == [(256, 8, 8), (512, 4, 4), (1024, 2, 2)]
    units = list(model.checkpoint_units())
    assert units[:4] == ['conv1', 'conv_res_block1.conv', 'conv_res_block1.res0',
                         'conv_res_block2.conv'] and len(units) == 1 + 5 + 23


@pytest.mark.filterwarnings('ignore:checkpoint mode .offload.')
@pytest.mark.parametrize('mode,frozen_stages', [('full', -1), ('selective', 2),
                                                ('offload', -1), ('full', 2)])
def test_every_mode_equals_plain(monkeypatch, mode, frozen_stages):
    plain = _small(frozen_stages=frozen_stages, out_indices=(1, 2, 3))
    assert_mode_exact(plain, torch.randn(2, 3, 16, 16, dtype=torch.float64), monkeypatch,
                      mode=mode, min_calls=8)


def test_with_cp_and_segment_equal_plain(monkeypatch):
    plain = _small(out_indices=(2, 3))
    x = torch.randn(1, 3, 16, 16, dtype=torch.float64)
    assert_mode_exact(plain, x, monkeypatch, segments=[['conv1', 'conv_res_block3.res7']])
    model = _small(out_indices=(2, 3), with_cp=True)
    model.load_state_dict(plain.state_dict())
    assert model.with_cp
    from tests.helpers.unit_modes import assert_same, train_run
    assert_same(train_run(plain, x), train_run(model, x))


def test_frozen_stages_and_norm_eval():
    model = _small(frozen_stages=2)
    frozen = {n.split('.')[0] for n, p in model.named_parameters() if not p.requires_grad}
    assert frozen == {'conv1', 'conv_res_block1'}
    assert not model.conv_res_block1.conv.bn.training
    assert model.conv_res_block2.conv.bn.training
    model = _small(norm_eval=True)
    assert not any(m.training for m in model.modules() if isinstance(m, _BatchNorm))


@pytest.mark.parametrize('kwargs,error,match', [
    (dict(depth=21), ValueError, 'invalid depth 21 for darknet: allowed are 53'),
    (dict(out_indices=(6, )), ValueError, r'out_indices must be stage indices in 0\.\.5'),
    (dict(frozen_stages=7), ValueError, r'frozen_stages must be an int in -1\.\.6'),
    (dict(pretrained=1), TypeError, 'pretrained must be a str or None'),
])
def test_bad_arguments(kwargs, error, match):
    with pytest.raises(error, match=match):
        Darknet(**kwargs)
