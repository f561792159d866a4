"""DyHead (mmdet 2.28.2's neck): keys of dyhead/'s configs, the blocks as checkpoint units with
every mode exact, mmcv's kernel reading of the level above's offsets, bad arguments refused;
HSigmoid and DyReLU by hand."""
import os.path as osp

import pytest
import torch
import torch.nn.functional as F

from ckptzoo.models.necks import DyHead
from ckptzoo.models.necks.dyhead import DyDCNv2
from ckptzoo.models.utils import DyReLU, HSigmoid, build_activation_layer
from ckptzoo.registry import build_model
from tests.helpers.checkpointing import one_thread
from tests.helpers.mmdet_config_count import mmdet_configs_root
from tests.helpers.necks import assert_every_mode_exact


@pytest.fixture
def single_thread():
    yield from one_thread()


def _feats(c=16, seed=1):
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(2, c, h, w, generator=gen) for h, w in ((8, 12), (4, 6), (2, 3))]


def _perturbed(cp, blocks=2):
    neck = DyHead(16, 16, num_blocks=blocks, with_cp=cp)
    gen = torch.Generator().manual_seed(7)
    with torch.no_grad():  # non-zero offsets and masks, so the sampling is deformed
        for p in neck.parameters():
            p.add_(torch.randn(p.shape, generator=gen) * 0.1)
    return neck


def test_config_neck_keys_as_mmdet():
    from mmengine.config import Config
    root = mmdet_configs_root()
    if root is None:
        pytest.skip("mmdet 2.28.2's configs are not installed")
    cfg = Config.fromfile(osp.join(root, 'dyhead/atss_r50_fpn_dyhead_1x_coco.py'),
                          import_custom_modules=False).model.neck
    cfg = [dict(c) for c in cfg]
    assert [n['type'] for n in cfg] == ['FPN', 'DyHead']
    with torch.device('meta'):
        neck = build_model(cfg[1])
    state = neck.state_dict()
    assert len(state) == 6 * 17
    block = {k[len('dyhead_blocks.0.'):]: tuple(v.shape) for k, v in state.items()
             if k.startswith('dyhead_blocks.0.')}
    assert block == {
        'spatial_conv_high.conv.weight': (256, 256, 3, 3), 'spatial_conv_high.norm.weight': (256, ),
        'spatial_conv_high.norm.bias': (256, ), 'spatial_conv_mid.conv.weight': (256, 256, 3, 3),
        'spatial_conv_mid.norm.weight': (256, ), 'spatial_conv_mid.norm.bias': (256, ),
        'spatial_conv_low.conv.weight': (256, 256, 3, 3), 'spatial_conv_low.norm.weight': (256, ),
        'spatial_conv_low.norm.bias': (256, ), 'spatial_conv_offset.weight': (27, 256, 3, 3),
        'spatial_conv_offset.bias': (27, ), 'scale_attn_module.1.weight': (1, 256, 1, 1),
        'scale_attn_module.1.bias': (1, ), 'task_attn_module.conv1.conv.weight': (64, 256, 1, 1),
        'task_attn_module.conv1.conv.bias': (64, ),
        'task_attn_module.conv2.conv.weight': (1024, 64, 1, 1),
        'task_attn_module.conv2.conv.bias': (1024, )}
    assert list(neck.checkpoint_units()) == [f'block{i}' for i in range(6)]
    assert neck.checkpoint_chains() == [[f'block{i}' for i in range(6)]]


def test_shapes_and_init():
    neck = DyHead(32, 16, num_blocks=2)
    outs = neck([torch.randn(1, 32, 8, 8), torch.randn(1, 32, 4, 4), torch.randn(1, 32, 2, 2)])
    assert isinstance(outs, tuple) and [o.shape[1:] for o in outs] == [(16, 8, 8), (16, 4, 4),
                                                                     (16, 2, 2)]
    block = neck.dyhead_blocks[0]
    assert (block.spatial_conv_offset.weight == 0).all()
    assert block.task_attn_module.conv1.conv.weight.std() < 0.02
    assert block.spatial_conv_mid.conv.bias is None
    assert not (DyHead(16, 16, 1, zero_init_offset=False).dyhead_blocks[0]
                .spatial_conv_offset.weight == 0).all()


def test_every_mode_is_exact(single_thread):
    assert_every_mode_exact(_perturbed, _feats())


def test_the_level_above_reads_the_offsets_as_mmcvs_kernel():
    """The middle level's offset and mask (larger) reach the level above's conv; mmcv's kernel
    reads each image's first C*h*w values of them as a C x h x w field."""
    torch.manual_seed(0)
    dcn = DyDCNv2(4, 8, norm_cfg=None)
    x = torch.randn(2, 4, 3, 5)
    offset, mask = torch.randn(2, 18, 6, 10), torch.rand(2, 9, 6, 10)
    got = dcn(x, offset, mask)
    read_off = torch.stack([o.flatten()[:18 * 15].view(18, 3, 5) for o in offset])
    read_mask = torch.stack([m.flatten()[:9 * 15].view(9, 3, 5) for m in mask])
    torch.testing.assert_close(got, dcn.conv(x, read_off, read_mask))
    with pytest.raises(ValueError, match='too small'):
        dcn(torch.randn(1, 4, 6, 6), offset[:1, :, :2, :2], mask[:1, :, :2, :2])


def test_hsigmoid_and_dyrelu_by_hand():
    x = torch.linspace(-5, 5, 11)
    torch.testing.assert_close(HSigmoid()(x), ((x + 3) / 6).clamp(0, 1))
    act = build_activation_layer(dict(type='HSigmoid', bias=1.0, divisor=2.0))
    torch.testing.assert_close(act(x), ((x + 1) / 2).clamp(0, 1))
    with pytest.raises(ValueError, match='divisor'):
        HSigmoid(divisor=0)
    torch.manual_seed(0)
    relu = DyReLU(8)
    assert sorted(relu.state_dict()) == ['conv1.conv.bias', 'conv1.conv.weight',
                                         'conv2.conv.bias', 'conv2.conv.weight']
    y = torch.randn(2, 8, 3, 3)
    pooled = y.mean((2, 3), keepdim=True)
    c = relu.conv2.conv(F.relu(relu.conv1.conv(pooled)))
    c = ((c + 3) / 6).clamp(0, 1) - 0.5
    a1, b1, a2, b2 = c.split(8, 1)
    torch.testing.assert_close(relu(y), torch.max(y * (2 * a1 + 1) + b1, y * 2 * a2 + b2))
    with pytest.raises(ValueError, match='act_cfg'):
        DyReLU(8, act_cfg=[dict(type='ReLU')])


def test_bad_arguments():
    with pytest.raises(ValueError, match='init_cfg'):
        DyHead(16, 16, init_cfg=dict(type='Normal'))
    with pytest.raises(ValueError, match='num_blocks'):
        DyHead(16, 16, num_blocks=0)
    with pytest.raises(TypeError, match='with_cp'):
        DyHead(16, 16, with_cp='full')
    with pytest.raises(TypeError, match='tuple or list'):
        DyHead(16, 16, 1)(torch.zeros(1, 16, 4, 4))
