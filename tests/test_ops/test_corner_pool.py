"""CornerPool (mmcv's): cumulative maxima towards a border, by hand; gradients to the argmax."""
import pytest
import torch

from ckptzoo.ops.corner_pool import CornerPool


def test_each_direction_by_hand():
    x = torch.tensor([[1., 3., 2.], [0., 5., 1.], [4., 0., 2.]])[None, None]
    brute = {
        'top': lambda a, y, x_: a[y:, x_].max(), 'bottom': lambda a, y, x_: a[:y + 1, x_].max(),
        'left': lambda a, y, x_: a[y, x_:].max(), 'right': lambda a, y, x_: a[y, :x_ + 1].max()}
    for mode, fn in brute.items():
        out = CornerPool(mode)(x)[0, 0]
        expected = torch.tensor([[fn(x[0, 0], i, j) for j in range(3)] for i in range(3)])
        torch.testing.assert_close(out, expected, msg=mode)


def test_gradient_reaches_the_maxima_only():
    x = torch.tensor([[[[1., 3., 2.]]]], requires_grad=True)
    CornerPool('right')(x).sum().backward()
    assert x.grad.tolist() == [[[[1., 2., 0.]]]]


def test_bad_mode():
    with pytest.raises(ValueError, match='top, bottom|bottom, left'):
        CornerPool('up')
