"""mmcv's merge cells (``models/utils/merge_cells.py``): keys, the binary ops, the resizing
(upsampling, padding then max-pooling), bad inputs refused."""
import pytest
import torch
import torch.nn.functional as F

from ckptzoo.models.utils.merge_cells import ConcatCell, GlobalPoolingCell, SumCell


def test_keys_as_mmcv():
    cell = ConcatCell(8, 8, with_input1_conv=True, out_norm_cfg=dict(type='BN'),
                      out_conv_order=('norm', 'act', 'conv'))
    assert list(cell.state_dict())[:2] == ['out_conv.conv.weight', 'out_conv.conv.bias']
    assert 'out_conv.bn.weight' in cell.state_dict() and cell.out_conv.bn.num_features == 16
    assert 'input1_conv.conv.weight' in cell.state_dict()
    assert not any(k.startswith('input2_conv') for k in cell.state_dict())
    assert list(GlobalPoolingCell(with_out_conv=False).state_dict()) == []


def test_ops_and_resizing():
    gen = torch.Generator().manual_seed(0)
    x1, x2 = torch.randn(2, 4, 5, 7, generator=gen), torch.randn(2, 4, 10, 14, generator=gen)
    gp = GlobalPoolingCell(with_out_conv=False)
    up = F.interpolate(x1, size=(10, 14), mode='nearest')
    torch.testing.assert_close(gp(x1, x2), x2 + x2.mean((2, 3), keepdim=True).sigmoid() * up)
    add = SumCell(4, 4, with_out_conv=False)
    # larger than the target and not a multiple: zero-padded (centred), then max-pooled
    pooled2 = F.max_pool2d(F.pad(x2, (0, 1, 0, 0)), (2, 3), (2, 3))
    pooled1 = F.max_pool2d(F.pad(x1, (1, 2, 0, 0)), (1, 2), (1, 2))
    torch.testing.assert_close(add(x2, x1, out_size=(5, 5)), pooled2 + pooled1)
    torch.testing.assert_close(add(x1, x2), up + x2)  # default: the larger size


def test_bad_inputs():
    with pytest.raises(ValueError, match='upsample_mode'):
        SumCell(4, 4, upsample_mode='bicubic')
    with pytest.raises(ValueError, match='batch and channels'):
        SumCell(4, 4, with_out_conv=False)(torch.randn(1, 4, 2, 2), torch.randn(1, 3, 2, 2))
