"""DyHead (neck): mmdet 2.28.2's keys for dyhead/atss_r50_fpn_dyhead_1x_coco.py, shapes, init,
mmcv's reading of a finer level's offsets, every checkpoint mode exact, bad arguments; its
DyReLU and HSigmoid."""
import pytest
import torch

from ckptzoo.models.necks.dyhead import DyDCNv2, _read_as_mmcv
from ckptzoo.models.utils import DyReLU, build_activation_layer
from ckptzoo.registry import build_model
from tests.helpers.checkpointing import one_thread
from tests.helpers.necks import assert_every_mode_exact


@pytest.fixture
def single_thread():
    yield from one_thread()


def _feats(channels=8, sizes=(16, 8, 4, 2, 1), n=2):
    gen = torch.Generator().manual_seed(1)
    return [torch.randn(n, channels, s, s, generator=gen) for s in sizes]


def _dyhead(**kw):
    torch.manual_seed(0)
    return build_model(dict(dict(type='DyHead', in_channels=8, out_channels=16, num_blocks=2),
                            **kw))


def test_config_neck_keys_and_shapes_as_mmdet(single_thread):
    from mmengine.config import Config

    from tests.helpers.mmdet_config_count import mmdet_configs_root
    root = mmdet_configs_root()
    if root is None:
        pytest.skip("mmdet 2.28.2's configs are not installed")
    cfg = Config.fromfile(f'{root}/dyhead/atss_r50_fpn_dyhead_1x_coco.py',
                          import_custom_modules=False).model.neck[1]
    with torch.device('meta'):
        neck = build_model(dict(cfg))
    state = neck.state_dict()
    assert len(state) == 6 * 17  # 3 x (conv, norm weight, bias), offset conv 2, scale 2, DyReLU 4
    assert list(state)[:4] == ['dyhead_blocks.0.spatial_conv_high.conv.weight',
                               'dyhead_blocks.0.spatial_conv_high.norm.weight',
                               'dyhead_blocks.0.spatial_conv_high.norm.bias',
                               'dyhead_blocks.0.spatial_conv_mid.conv.weight']
    assert 'dyhead_blocks.5.task_attn_module.conv2.conv.bias' in state
    assert 'dyhead_blocks.5.scale_attn_module.1.weight' in state
    assert list(neck.checkpoint_units()) == [f'block{i}' for i in range(6)]
    small = _dyhead()
    with torch.no_grad():
        outs = small(_feats())
    assert [tuple(o.shape) for o in outs] == [(2, 16, s, s) for s in (16, 8, 4, 2, 1)]


def test_mmdets_init():
    block = _dyhead().dyhead_blocks[0]
    assert (block.spatial_conv_offset.weight == 0).all()
    assert (block.spatial_conv_offset.bias == 0).all()
    assert block.scale_attn_module[1].weight.std() < 0.05
    assert (block.task_attn_module.conv1.conv.bias == 0).all()
    assert block.spatial_conv_mid.conv.bias is None  # a norm follows
    bound = 1 / (8 * 9) ** 0.5  # mmcv's uniform init of the deformable conv
    assert block.spatial_conv_mid.conv.weight.abs().max() <= bound
    assert not (_dyhead(zero_init_offset=False).dyhead_blocks[0]
                .spatial_conv_offset.weight == 0).all()


def test_a_finer_levels_offsets_are_read_as_mmcv_reads_them():
    """mmcv's kernel indexes each image's offsets with the output's layout: offsets of a 4x4
    level for a 2x2 output are that image's first 18 * 4 values."""
    offset = torch.arange(2 * 18 * 16.).reshape(2, 18, 4, 4)
    read = _read_as_mmcv(offset, 2, 2)
    torch.testing.assert_close(read[1].flatten(), offset[1].flatten()[:18 * 4])
    assert _read_as_mmcv(offset, 4, 4) is offset
    with pytest.raises(ValueError, match='too small'):
        _read_as_mmcv(offset, 5, 5)
    conv = DyDCNv2(4, 16)
    x = torch.randn(2, 4, 2, 2)
    mask = torch.rand(2, 9, 4, 4)
    out = conv(x, offset * 0.01, mask)
    ref = conv.norm(conv.conv(x, _read_as_mmcv(offset * 0.01, 2, 2), _read_as_mmcv(mask, 2, 2)))
    torch.testing.assert_close(out, ref)


def test_every_mode_is_exact(single_thread):
    assert_every_mode_exact(lambda cp: _dyhead(with_cp=cp, zero_init_offset=False), _feats())


def test_dyrelu_and_hsigmoid():
    hs = build_activation_layer(dict(type='HSigmoid', bias=3.0, divisor=6.0))
    torch.testing.assert_close(hs(torch.tensor([-4., 0., 1.5, 9.])),
                               torch.tensor([0., 0.5, 0.75, 1.]))
    relu = DyReLU(8)
    x = torch.randn(2, 8, 3, 3)
    with torch.no_grad():
        relu.conv2.conv.weight.zero_()
        relu.conv2.conv.bias.zero_()  # HSigmoid(0) = 0.5: a1 = 1, b1 = 0, a2 = 0, b2 = 0
    torch.testing.assert_close(relu(x), x.clamp(min=0))
    with pytest.raises(ValueError, match='act_cfg must be a dict or a pair'):
        DyReLU(8, act_cfg=[dict(type='ReLU')])


def test_bad_arguments():
    with pytest.raises(ValueError, match='init_cfg must be None'):
        _dyhead(init_cfg=dict(type='Normal'))
    with pytest.raises(ValueError, match='num_blocks must be a positive int, got 0'):
        _dyhead(num_blocks=0)
    with pytest.raises(TypeError, match='tuple or list'):
        _dyhead()(torch.zeros(1, 8, 2, 2))
