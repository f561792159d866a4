import pytest
import torch

from ckptzoo.registry import TASK_UTILS


def test_encode_by_hand_and_round_trip():
    coder = TASK_UTILS.build(dict(type='TBLRBBoxCoder', normalizer=4.0))
    priors = torch.tensor([[0., 0., 8., 8.], [8., 8., 24., 16.]])
    gts = torch.tensor([[2., 1., 10., 5.], [4., 6., 30., 20.]])
    enc = coder.encode(priors, gts)
    # prior 0: centre (4, 4), w = h = 8: top 3 / 8, bottom 1 / 8, left 2 / 8, right 6 / 8
    torch.testing.assert_close(enc[0], torch.tensor([3., 1., 2., 6.]) / 8 / 4)
    # prior 1: centre (16, 12), w 16, h 8
    torch.testing.assert_close(enc[1], torch.tensor([6. / 8, 8. / 8, 12. / 16, 14. / 16]) / 4)
    torch.testing.assert_close(coder.decode(priors, enc), gts)


def test_decode_clips_and_batches():
    coder = TASK_UTILS.build(dict(type='TBLRBBoxCoder', normalizer=[1., 1., 1., 1.]))
    priors = torch.tensor([[0., 0., 8., 8.]])
    tblr = torch.tensor([[1., 1., 1., 1.]])  # 8 px each side of (4, 4)
    torch.testing.assert_close(coder.decode(priors, tblr, max_shape=(10, 6)),
                               torch.tensor([[0., 0., 6., 10.]]))
    boxes = coder.decode(priors[None].expand(2, 1, 4), tblr[None].expand(2, 1, 4),
                         max_shape=[(10, 6), (20, 9)])
    torch.testing.assert_close(boxes, torch.tensor([[[0., 0., 6., 10.]], [[0., 0., 9., 12.]]]))
    no_clip = TASK_UTILS.build(dict(type='TBLRBBoxCoder', normalizer=1.0, clip_border=False))
    torch.testing.assert_close(no_clip.decode(priors, tblr, max_shape=(10, 6)),
                               torch.tensor([[-4., -4., 12., 12.]]))


def test_bad_normalizer():
    with pytest.raises(ValueError, match='normalizer must be a float or 4 numbers'):
        TASK_UTILS.build(dict(type='TBLRBBoxCoder', normalizer=[1., 2.]))
