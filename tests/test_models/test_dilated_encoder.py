"""DilatedEncoder (YOLOF): mmdet 2.28.2's keys for yolof/'s neck, shapes, every checkpoint mode
exact (BN statistics included), bad arguments refused."""
import pytest
import torch

from ckptzoo.models import DilatedEncoder
from ckptzoo.registry import build_model
from tests.helpers.checkpointing import one_thread
from tests.helpers.necks import assert_every_mode_exact, mmdet_neck_cfg


@pytest.fixture
def single_thread():
    yield from one_thread()


def test_config_neck_keys_and_shapes_as_mmdet():
    with torch.device('meta'):
        neck = build_model(mmdet_neck_cfg('yolof/yolof_r50_c5_8x8_1x_coco.py'))
    state = neck.state_dict()
    assert len(state) == 86 and sum(v.numel() for v in state.values()) == 4539406
    assert list(state)[:3] == ['lateral_conv.weight', 'lateral_conv.bias', 'lateral_norm.weight']
    assert 'dilated_encoder_blocks.3.conv2.conv.weight' in state
    assert neck.dilated_encoder_blocks[3].conv2.conv.dilation == (8, 8)
    assert list(neck.checkpoint_units()) == ['lateral'] + [f'block{i}' for i in range(4)]
    small = DilatedEncoder(16, 8, 4, 2, [2, 4])
    with torch.no_grad():
        outs = small([torch.randn(2, 4, 8, 8), torch.randn(2, 16, 4, 4)])
    assert len(outs) == 1 and tuple(outs[0].shape) == (2, 8, 4, 4)


def test_every_mode_is_exact(single_thread):
    gen = torch.Generator().manual_seed(1)
    feats = [torch.randn(2, 16, 8, 8, generator=gen)]
    assert_every_mode_exact(lambda cp: DilatedEncoder(16, 8, 4, 3, [1, 2, 3], with_cp=cp),
                            feats)


def test_bad_arguments():
    with pytest.raises(TypeError, match='with_cp'):
        DilatedEncoder(16, 8, 4, 2, [2, 4], with_cp=1)
    with pytest.raises(ValueError, match='block_dilations'):
        DilatedEncoder(16, 8, 4, 3, [2, 4])
