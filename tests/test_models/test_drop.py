import pytest
import torch

from ckptzoo.models.utils.drop import DropPath, drop_path


def test_drop_path_draws_as_mmcv():
    """One ``torch.rand`` per sample, ``floor(keep + rand)``, kept samples scaled by 1 / keep
    (mmcv's draw: the same seed drops the same samples as mmdet / mmcls)."""
    x = torch.randn(64, 3, 4)
    torch.manual_seed(0)
    got = drop_path(x, 0.25, training=True)
    torch.manual_seed(0)
    keep = (0.75 + torch.rand(64, 1, 1)).floor()
    torch.testing.assert_close(got, x / 0.75 * keep, rtol=0, atol=0)
    assert 0 < keep.sum() < 64
    assert drop_path(x, 0.25, training=False) is x and drop_path(x, 0.0, training=True) is x
    module = DropPath(0.25).eval()
    assert module(x) is x and 'drop_prob=0.25' in repr(module)
    with pytest.raises(ValueError, match=r'drop_prob must be in \[0, 1\), got 1.0'):
        DropPath(1.0)
