"""CTResNetNeck (CenterNet): mmdet 2.28.2's keys for centernet/'s neck (use_dcn=False), the
transposed convs' bilinear initialisation, every checkpoint mode exact, use_dcn refused clearly
while the zoo has no DCNv2."""
import pytest
import torch

from ckptzoo.models import CTResNetNeck
from ckptzoo.models.utils import CONV_LAYERS
from ckptzoo.registry import build_model
from tests.helpers.checkpointing import one_thread
from tests.helpers.necks import assert_every_mode_exact, mmdet_neck_cfg


@pytest.fixture
def single_thread():
    yield from one_thread()


def test_config_neck_keys_and_shapes_as_mmdet():
    neck = build_model(mmdet_neck_cfg('centernet/centernet_resnet18_140e_coco.py'))
    state = neck.state_dict()
    assert len(state) == 36 and sum(v.numel() for v in state.values()) == 2928134
    assert list(state)[:3] == ['deconv_layers.0.conv.weight', 'deconv_layers.0.bn.weight',
                               'deconv_layers.0.bn.bias']
    up = neck.deconv_layers[1].conv
    assert isinstance(up, torch.nn.ConvTranspose2d) and up.stride == (2, 2)
    # mmdet's bilinear kernel (4x4: 0.0625 ... 0.5625) in w[c, 0] of every input channel
    w = up.weight[:, 0]
    torch.testing.assert_close(w, w[:1].expand_as(w))
    assert w[0, 1, 1].item() == pytest.approx(0.5625) and w[0, 0, 0].item() == pytest.approx(
        0.0625)
    assert list(neck.checkpoint_units()) == ['stage0', 'stage1', 'stage2']
    small = CTResNetNeck(8, (8, 4), (4, 4), use_dcn=False)
    with torch.no_grad():
        outs = small([torch.randn(2, 8, 4, 4)])
    assert len(outs) == 1 and tuple(outs[0].shape) == (2, 4, 16, 16)


def test_every_mode_is_exact(single_thread):
    gen = torch.Generator().manual_seed(1)
    assert_every_mode_exact(
        lambda cp: CTResNetNeck(8, (8, 4), (4, 4), use_dcn=False, with_cp=cp),
        [torch.randn(2, 8, 4, 4, generator=gen)])


@pytest.mark.skipif('DCNv2' in CONV_LAYERS, reason='the zoo has DCNv2')
def test_use_dcn_needs_dcnv2():
    with pytest.raises(NotImplementedError, match='use_dcn'):
        CTResNetNeck(8, (8, ), (4, ))


def test_bad_arguments():
    with pytest.raises(ValueError, match='num_deconv_kernels'):
        CTResNetNeck(8, (8, 4), (4, ), use_dcn=False)
    with pytest.raises(TypeError, match='list or tuple'):
        CTResNetNeck(8, (8, ), (4, ), use_dcn=False)(torch.randn(1, 8, 4, 4))
