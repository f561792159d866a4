"""mask_matrix_nms (mmdet 2.28.2's) by hand: decay of overlapping same-class masks,
compensation, other classes untouched, filter / top-k, empty input, refusals."""
import math

import pytest
import torch

from ckptzoo.core.post_processing import mask_matrix_nms


def _masks():
    m = torch.zeros(3, 4, 4, dtype=torch.bool)
    m[0, :2] = True          # 8 px
    m[1, :1] = True          # 4 px, inside mask 0: IoU 0.5
    m[2, :2] = True          # same pixels as mask 0, other class
    return m


@pytest.mark.parametrize('kernel', ['gaussian', 'linear'])
def test_decay_by_hand(kernel):
    masks = _masks()
    labels = torch.tensor([0, 0, 1])
    scores = torch.tensor([0.9, 0.8, 0.7])
    s, l, m, keep = mask_matrix_nms(masks, labels, scores, kernel=kernel, sigma=2.0)
    decayed = 0.8 * (math.exp(-2.0 * 0.25) if kernel == 'gaussian' else 0.5)
    expected = sorted([(0.9, 0), (decayed, 1), (0.7, 2)], reverse=True)
    torch.testing.assert_close(s, torch.tensor([e[0] for e in expected]))
    assert keep.tolist() == [e[1] for e in expected]
    assert l.tolist() == labels[keep].tolist() and torch.equal(m, masks[keep])


def test_filter_and_topk_and_empty():
    masks, labels = _masks(), torch.tensor([0, 0, 1])
    scores = torch.tensor([0.9, 0.8, 0.7])
    s, _, _, keep = mask_matrix_nms(masks, labels, scores, filter_thr=0.6, kernel='linear')
    assert keep.tolist() == [0, 2]
    s, _, _, keep = mask_matrix_nms(masks, labels, scores, nms_pre=2, max_num=1)
    assert keep.tolist() == [0] and s.tolist() == pytest.approx([0.9])
    out = mask_matrix_nms(masks, labels, scores, filter_thr=0.95)
    assert [len(t) for t in out] == [0, 0, 0, 0] and out[2].shape == (0, 4, 4)
    out = mask_matrix_nms(masks[:0], labels[:0], scores[:0])
    assert [len(t) for t in out] == [0, 0, 0, 0]


def test_refusals():
    masks, labels, scores = _masks(), torch.tensor([0, 0, 1]), torch.rand(3)
    with pytest.raises(ValueError, match='kernel'):
        mask_matrix_nms(masks, labels, scores, kernel='box')
    with pytest.raises(ValueError, match='as many'):
        mask_matrix_nms(masks, labels[:2], scores)
    with pytest.raises(ValueError, match='mask_area'):
        mask_matrix_nms(masks, labels, scores, mask_area=torch.ones(2))
