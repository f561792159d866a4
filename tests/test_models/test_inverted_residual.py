"""InvertedResidual (mmdet's): keys, shortcut rule, SE, its own checkpoint unit with drop path
exact under recompute, bad arguments."""
import pytest
import torch

from ckptzoo.models.utils import InvertedResidual
from tests.helpers.checkpointing import one_thread
from tests.helpers.unit_modes import Counting, assert_same, randomise_bn, train_run

one_thread = pytest.fixture(autouse=True)(one_thread)


def test_keys_and_shortcut():
    block = InvertedResidual(8, 8, 24, se_cfg=dict(channels=24, ratio=4))
    assert block.with_res_shortcut and list(block.state_dict())[0] == 'expand_conv.conv.weight'
    assert 'se.conv1.conv.weight' in block.state_dict()
    assert block.depthwise_conv.conv.groups == 24 and not block.linear_conv.with_activation
    assert not InvertedResidual(8, 16, 24).with_res_shortcut
    assert not InvertedResidual(8, 8, 24, stride=2).with_res_shortcut
    assert not hasattr(InvertedResidual(8, 8, 8, with_expand_conv=False), 'expand_conv')


@pytest.mark.parametrize('mode', ['full', 'selective'])
def test_drop_path_exact_under_recompute(monkeypatch, mode):
    torch.manual_seed(0)
    plain = randomise_bn(InvertedResidual(8, 8, 16, drop_path_rate=0.5)).double().train()
    model = randomise_bn(InvertedResidual(8, 8, 16, drop_path_rate=0.5)).double().train()
    model.load_state_dict(plain.state_dict())
    model.cp_unit.mode = mode
    assert model.with_cp
    x = torch.randn(8, 8, 4, 4, dtype=torch.float64)
    ref = train_run(plain, x, seed=3)
    counting = Counting(monkeypatch)
    assert_same(ref, train_run(model, x, seed=3))
    assert counting.calls == 1
    dropped = ref[0][0].sub(x).flatten(1).abs().sum(1) == 0  # the path dropped: out == x
    assert 0 < int(dropped.sum()) < 8


@pytest.mark.parametrize('kwargs,match', [
    (dict(stride=3), 'stride must be 1 or 2'),
    (dict(se_cfg=4), 'se_cfg must be a dict'),
    (dict(with_expand_conv=False), r'mid_channels must equal in_channels \(8\)'),
])
def test_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        InvertedResidual(8, 8, 16, **kwargs)
