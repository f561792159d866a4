import math

import pytest
import torch

from ckptzoo.registry import TASK_UTILS


def test_encode_by_hand_and_decode_inverts():
    coder = TASK_UTILS.build(dict(type='YOLOBBoxCoder'))
    anchors = torch.tensor([[0., 0., 32., 16.], [8., 8., 24., 24.]])
    gts = torch.tensor([[4., 2., 36., 34.], [10., 6., 18., 22.]])
    stride = torch.tensor([32., 8.])
    t = coder.encode(anchors, gts, stride)
    # centre (20, 18) vs (16, 8): (4 / 32 + 0.5, 10 / 32 + 0.5); size (32 / 32, 32 / 16)
    torch.testing.assert_close(t[0], torch.tensor([0.625, 0.8125, 0., math.log(2.)]))
    # centre (14, 14) vs (16, 16) at stride 8: (0.25, 0.25); size (8 / 16, 16 / 16)
    torch.testing.assert_close(t[1], torch.tensor([0.25, 0.25, math.log(0.5), 0.]))
    torch.testing.assert_close(coder.decode(anchors, t, stride[:, None]), gts)


def test_encode_clamps():
    coder = TASK_UTILS.build(dict(type='YOLOBBoxCoder', eps=1e-3))
    t = coder.encode(torch.tensor([[0., 0., 8., 8.]]), torch.tensor([[100., 4., 100., 4.]]), 8.)
    assert t[0, 0].item() == pytest.approx(1 - 1e-3) and t[0, 1].item() == pytest.approx(0.5)
    assert t[0, 2].item() == pytest.approx(math.log(1e-3))


def test_bad_shapes():
    coder = TASK_UTILS.build(dict(type='YOLOBBoxCoder'))
    with pytest.raises(ValueError, match='one gt box per anchor'):
        coder.encode(torch.zeros(2, 4), torch.zeros(3, 4), 8.)
    with pytest.raises(ValueError, match='4 numbers'):
        coder.decode(torch.zeros(2, 4), torch.zeros(2, 5), 8.)
