"""ResNeXt: torchvision weights load strictly and give its features; with_cp is exact."""
import pytest
import torch
import torchvision
from torch.nn.modules.batchnorm import _BatchNorm

from ckptzoo.models import ResNeXt
from ckptzoo.registry import build_backbone
from tests.helpers.checkpointing import expected_checkpoints, one_thread, train_pass


@pytest.fixture
def single_thread():
    yield from one_thread()


def test_torchvision_resnext50_32x4d_loads_strictly_and_matches(single_thread):
    torch.manual_seed(0)
    tv = torchvision.models.resnext50_32x4d().eval()
    model = build_backbone(dict(type='ResNeXt', depth=50, groups=32, base_width=4,
                                out_indices=(0, 1, 2, 3), style='pytorch')).eval()
    state = {k: v for k, v in tv.state_dict().items() if not k.startswith('fc.')}
    assert model.load_state_dict(state, strict=True).missing_keys == []
    assert model.layer1[0].conv2.groups == 32 and model.layer1[0].conv2.out_channels == 128
    x = torch.randn(1, 3, 32, 32)
    with torch.no_grad():
        outs = model(x)
        y = tv.maxpool(tv.relu(tv.bn1(tv.conv1(x))))
        for i, layer in enumerate((tv.layer1, tv.layer2, tv.layer3, tv.layer4)):
            y = layer(y)
            torch.testing.assert_close(outs[i], y, rtol=0, atol=0)


def _randomise_bn(model):
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, _BatchNorm):
                m.running_mean.uniform_(-0.5, 0.5)
                m.running_var.uniform_(0.5, 2.0)
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.2, 0.2)


@pytest.mark.filterwarnings('error')
@pytest.mark.parametrize('reentrant,frozen_stages,style', [
    (False, -1, 'pytorch'), (True, 1, 'pytorch'), (False, 1, 'caffe')])
def test_with_cp_is_exact(count_cp, single_thread, reentrant, frozen_stages, style):
    dtype = torch.float64 if reentrant else torch.float32  # see test_resnet.py
    torch.manual_seed(1)
    kwargs = dict(depth=50, groups=4, base_width=4, base_channels=8, style=style,
                  frozen_stages=frozen_stages, norm_eval=False, zero_init_residual=False,
                  cp_use_reentrant=reentrant)
    plain = ResNeXt(**kwargs, with_cp=False).to(dtype).train()
    _randomise_bn(plain)
    assert plain.layer2[0].conv2.groups == 4 and plain.layer2[0].conv2.out_channels == 32
    ckpt = ResNeXt(**kwargs, with_cp=True).to(dtype).train()
    ckpt.load_state_dict(plain.state_dict())
    x = torch.randn(2, 3, 32, 32, dtype=dtype, requires_grad=True)
    weights = [torch.randn_like(o) for o in plain(x)]
    plain.load_state_dict(ckpt.state_dict())  # undo the BN update of the shape probe

    ref = train_pass(plain, x, weights)
    assert count_cp['checkpoints'] == 0
    out = train_pass(ckpt, x, weights)
    assert count_cp['checkpoints'] == expected_checkpoints(50, frozen_stages, reentrant, True)
    for a, b in zip(out[0], ref[0]):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-6)
    torch.testing.assert_close(out[1], ref[1], rtol=0, atol=1e-6)
    assert set(out[2]) == set(ref[2])
    for name, grad in ref[2].items():
        assert grad is not None and out[2][name] is not None, name
        torch.testing.assert_close(out[2][name], grad, rtol=0, atol=1e-6, msg=name)
    for name, buf in ref[3].items():
        torch.testing.assert_close(out[3][name], buf, rtol=0, atol=1e-6, msg=name)


def test_groups_one_is_resnet_and_bad_arguments():
    from ckptzoo.models import ResNet
    a = ResNeXt(depth=50, groups=1, base_channels=8)
    b = ResNet(depth=50, base_channels=8)
    assert {k: v.shape for k, v in a.state_dict().items()} == \
        {k: v.shape for k, v in b.state_dict().items()}
    with pytest.raises(ValueError, match='invalid depth 18 for ResNeXt: allowed are 50, 101, 152'):
        ResNeXt(depth=18, groups=32)
    with pytest.raises(ValueError, match='ResNeXt groups must be a positive int, got 0'):
        ResNeXt(depth=50, groups=0)
    with pytest.raises(ValueError, match='ResNeXt base_width must be a positive int'):
        ResNeXt(depth=50, groups=4, base_width=0)
