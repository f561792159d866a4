"""Frozen BatchNorm: mmcv's numbers (eval-mode ``F.batch_norm``, bit for bit), only the
per-channel scale saved for backward, BatchNorm's keys; on by itself with requires_grad=False +
norm_eval=True."""
import pytest
import torch
import torch.nn.functional as F
from torchvision.ops.misc import FrozenBatchNorm2d

from ckptzoo.models import ResNet
from ckptzoo.models.utils import build_norm_layer
from ckptzoo.memory.measure.trackers import saved_tensor_bytes


def _bn(requires_grad=False):
    bn = build_norm_layer(dict(type='BN', requires_grad=requires_grad), 8)[1]
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        bn.running_mean.copy_(torch.rand(8, generator=gen) - 0.5)
        bn.running_var.copy_(torch.rand(8, generator=gen) + 0.5)
        bn.weight.copy_(torch.rand(8, generator=gen) + 0.5)
        bn.bias.copy_(torch.rand(8, generator=gen) - 0.5)
    return bn


def test_frozen_bn_is_mmcvs_batch_norm_and_saves_nothing():
    bn = _bn().eval()
    assert bn.is_frozen()
    frozen = FrozenBatchNorm2d(8)
    frozen.load_state_dict({k: v for k, v in bn.state_dict().items()
                            if k != 'num_batches_tracked'})
    x = torch.randn(2, 8, 16, 16, requires_grad=True)
    saved, out = saved_tensor_bytes(bn, x)
    plain = F.batch_norm(x, bn.running_mean, bn.running_var, bn.weight, bn.bias, False, 0.0,
                         bn.eps)
    assert torch.equal(out, plain)  # mmcv's BN in eval mode, bit for bit
    # torchvision's x * scale + shift is the same map, rounded otherwise
    torch.testing.assert_close(out, frozen(x), rtol=0, atol=1e-6)
    assert not torch.equal(out, frozen(x))
    assert saved == 8 * 4  # the per-channel scale, not the 8 KiB input
    assert saved_tensor_bytes(torch.nn.BatchNorm2d(8).eval(), x)[0] >= x.numel() * 4
    grad = torch.randn_like(out)
    (gx, ) = torch.autograd.grad(out, x, grad)
    (gp, ) = torch.autograd.grad(plain, x, grad)
    torch.testing.assert_close(gx, gp, rtol=0, atol=1e-6)


@pytest.mark.parametrize('requires_grad,train', [(True, False), (False, True)])
def test_trained_or_training_bn_is_plain_bn(requires_grad, train):
    bn = _bn(requires_grad).train(train)
    assert not bn.is_frozen()
    x = torch.randn(2, 8, 4, 4)
    ref = torch.nn.BatchNorm2d(8).train(train)
    ref.load_state_dict(bn.state_dict())
    assert torch.equal(bn(x), ref(x))
    assert torch.equal(bn.running_mean, ref.running_mean)


def test_resnet_with_frozen_bn_saves_less_and_loads_torchvision_keys():
    import torchvision
    tv = torchvision.models.resnet18(weights=None)
    kwargs = dict(depth=18, norm_eval=True, frozen_stages=1)
    frozen = ResNet(**kwargs, norm_cfg=dict(type='BN', requires_grad=False)).train()
    trained = ResNet(**kwargs).train()
    missing, unexpected = frozen.load_state_dict(tv.state_dict(), strict=False)
    assert not missing and set(unexpected) == {'fc.weight', 'fc.bias'}
    trained.load_state_dict(frozen.state_dict())
    x = torch.randn(1, 3, 64, 64)
    saved_frozen, out_frozen = saved_tensor_bytes(frozen, x, include_params=False)
    saved_trained, out_trained = saved_tensor_bytes(trained, x, include_params=False)
    for a, b in zip(out_frozen, out_trained):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-5)
    # the trained-affine BNs keep their inputs; the frozen ones keep a scale per channel
    assert saved_frozen < 0.75 * saved_trained, (saved_frozen, saved_trained)
