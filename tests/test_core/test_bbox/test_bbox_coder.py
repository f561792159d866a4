import math

import pytest
import torch

from ckptzoo.core.bbox import DeltaXYWHBBoxCoder
from ckptzoo.registry import TASK_UTILS


def test_encode_by_hand():
    coder = DeltaXYWHBBoxCoder()
    anchors = torch.tensor([[0., 0., 10., 10.]])
    gt = torch.tensor([[5., 5., 15., 25.]])
    # centres (5, 5) -> (10, 15), sizes 10x10 -> 10x20
    torch.testing.assert_close(coder.encode(anchors, gt),
                               torch.tensor([[0.5, 1.0, 0.0, math.log(2)]]))
    coder = TASK_UTILS.build(dict(type='DeltaXYWHBBoxCoder', target_means=[0., 0., 0., 0.],
                                  target_stds=[0.1, 0.1, 0.2, 0.2]))
    torch.testing.assert_close(coder.encode(anchors, gt),
                               torch.tensor([[5.0, 10.0, 0.0, math.log(2) / 0.2]]))


def test_decode_inverts_encode():
    torch.manual_seed(0)
    xy = torch.rand(50, 2) * 100
    anchors = torch.cat([xy, xy + 1 + torch.rand(50, 2) * 50], dim=1)
    xy = torch.rand(50, 2) * 100
    gt = torch.cat([xy, xy + 1 + torch.rand(50, 2) * 50], dim=1)
    for coder in (DeltaXYWHBBoxCoder(),
                  DeltaXYWHBBoxCoder(target_means=(0.1, -0.1, 0.0, 0.2),
                                     target_stds=(0.1, 0.1, 0.2, 0.2))):
        deltas = coder.encode(anchors, gt)
        torch.testing.assert_close(coder.decode(anchors, deltas, wh_ratio_clip=1e-6), gt,
                                   rtol=0, atol=1e-3)


def test_decode_clips_to_max_shape_and_ratio():
    coder = DeltaXYWHBBoxCoder()
    anchors = torch.tensor([[0., 0., 10., 10.]])
    # width x4: [-15, 0, 25, 10]; clipped to w=20, h=8
    deltas = torch.tensor([[0., 0., math.log(4), 0.]])
    torch.testing.assert_close(coder.decode(anchors, deltas),
                               torch.tensor([[-15., 0., 25., 10.]]))
    torch.testing.assert_close(coder.decode(anchors, deltas, max_shape=(8, 20, 3)),
                               torch.tensor([[0., 0., 20., 8.]]))
    # dw = 10 is clamped to |log(16 / 1000)|: width 10 * 62.5
    big = coder.decode(anchors, torch.tensor([[0., 0., 10., 0.]]))
    torch.testing.assert_close(big, torch.tensor([[5 - 312.5, 0., 5 + 312.5, 10.]]))
    no_clip = DeltaXYWHBBoxCoder(clip_border=False)
    torch.testing.assert_close(no_clip.decode(anchors, deltas, max_shape=(8, 20)),
                               torch.tensor([[-15., 0., 25., 10.]]))


def test_ctr_clamp():
    coder = DeltaXYWHBBoxCoder(add_ctr_clamp=True, ctr_clamp=32)
    anchors = torch.tensor([[0., 0., 10., 10.]])
    # a shift of 10 widths (100 px) is clamped to 32 px
    out = coder.decode(anchors, torch.tensor([[10., 0., 0., 0.]]))
    torch.testing.assert_close(out, torch.tensor([[32., 0., 42., 10.]]))


def test_batched_decode_with_per_image_shape():
    coder = DeltaXYWHBBoxCoder()
    anchors = torch.tensor([[0., 0., 10., 10.], [10., 10., 30., 30.]])
    deltas = torch.zeros(2, 2, 4)
    out = coder.decode(anchors, deltas, max_shape=[(20, 25), (8, 8)])
    torch.testing.assert_close(out[0], torch.tensor([[0., 0., 10., 10.], [10., 10., 25., 20.]]))
    torch.testing.assert_close(out[1], torch.tensor([[0., 0., 8., 8.], [8., 8., 8., 8.]]))


def test_shape_mismatch_is_an_error():
    with pytest.raises(ValueError, match='one shape'):
        DeltaXYWHBBoxCoder().encode(torch.zeros(2, 4), torch.zeros(3, 4))


def test_legacy_coder_by_hand():
    """mmdet 1.x: widths are x2 - x1 + 1; decoded boxes clipped to [0, W - 1]."""
    from ckptzoo.core.bbox import LegacyDeltaXYWHBBoxCoder
    coder = TASK_UTILS.build(dict(type='LegacyDeltaXYWHBBoxCoder'))
    assert isinstance(coder, LegacyDeltaXYWHBBoxCoder)
    box = torch.tensor([[0., 0., 9., 9.]])  # 10 x 10 pixels, centre 4.5
    gt = torch.tensor([[5., 0., 24., 9.]])  # 20 x 10, centre (14.5, 4.5)
    torch.testing.assert_close(coder.encode(box, gt),
                               torch.tensor([[1.0, 0., math.log(2.), 0.]]))
    # decoding spans centre -+ w / 2 (not (w - 1) / 2): half a pixel wider than gt, as mmdet
    torch.testing.assert_close(coder.decode(box, coder.encode(box, gt)),
                               torch.tensor([[4.5, -0.5, 24.5, 9.5]]))
    torch.testing.assert_close(coder.decode(box, coder.encode(box, gt), max_shape=(8, 20)),
                               torch.tensor([[4.5, 0., 19., 7.]]))
    with pytest.raises(ValueError, match='target_means'):
        TASK_UTILS.build(dict(type='LegacyDeltaXYWHBBoxCoder', target_means=(0., 0.)))


def test_legacy_coder_decodes_no_box():
    """A level that keeps no box after the score threshold (legacy SSD) decodes to none."""
    coder = TASK_UTILS.build(dict(type='LegacyDeltaXYWHBBoxCoder'))
    assert coder.decode(torch.zeros(0, 4), torch.zeros(0, 4), max_shape=(8, 8)).shape == (0, 4)
