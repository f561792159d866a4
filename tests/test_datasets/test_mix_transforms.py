"""Mosaic and MixUp (mmdet 2.x): geometry by hand for fixed draws, partners from
``get_indexes``, numpy's generator as mmdet draws from it."""
import numpy as np
import pytest

from ckptzoo.datasets.pipelines import MixUp, Mosaic
from ckptzoo.datasets.pipelines import mix_transforms


def _item(h, w, value, boxes, labels):
    return dict(img=np.full((h, w, 3), value, np.uint8), img_shape=(h, w, 3),
                gt_bboxes=np.array(boxes, np.float32).reshape(-1, 4),
                gt_labels=np.array(labels, np.int64), bbox_fields=['gt_bboxes'])


def _draws(monkeypatch, uniforms, randints=()):
    uniforms, randints = list(uniforms), list(randints)
    monkeypatch.setattr(mix_transforms.random, 'uniform', lambda *a: uniforms.pop(0))
    monkeypatch.setattr(mix_transforms.random, 'randint', lambda *a: randints.pop(0))


def test_mosaic_by_hand(monkeypatch):
    # canvas 40 x 40 (img_scale 20 x 20), centre (0.5 * 20, 1.0 * 20) = (10, 20)
    _draws(monkeypatch, [0.0, 0.5, 1.0])
    res = _item(10, 10, 1, [[0, 0, 10, 10]], [0])  # scaled x2 to 20 x 20
    res['mix_results'] = [_item(20, 20, 2, [[2, 2, 6, 6]], [1]),
                          _item(40, 20, 3, [], []),  # scaled x0.5 to 20 x 10 (w x h)
                          _item(20, 20, 4, [[15, 15, 20, 20]], [3])]
    out = Mosaic(img_scale=(20, 20), pad_val=9)(res)
    img = out['img'][..., 0]
    assert out['img_shape'] == (40, 40, 3) and img.dtype == np.uint8
    assert (img[0:20, 0:10] == 1).all()  # top left: the right half of image 1
    assert (img[0:20, 10:30] == 2).all() and (img[0:20, 30:] == 9).all()
    assert (img[20:40, 0:10] == 3).all()
    assert (img[20:40, 10:30] == 4).all() and (img[20:40, 30:] == 9).all()
    np.testing.assert_array_equal(out['gt_bboxes'], [[0, 0, 10, 20], [12, 2, 16, 6],
                                                     [25, 35, 30, 40]])
    assert out['gt_labels'].tolist() == [0, 1, 3]


def test_mosaic_prob_and_indexes():
    np.random.seed(0)
    res = _item(10, 10, 1, [], [])
    assert Mosaic(prob=0.0)(res) is res
    indexes = [i for _ in range(200) for i in Mosaic().get_indexes(range(4))]
    assert sorted(set(indexes)) == [0, 1, 2, 3]
    with pytest.raises(ValueError, match='three partner images'):
        Mosaic()(_item(10, 10, 1, [], []))
    with pytest.raises(ValueError, match='prob must be in'):
        Mosaic(prob=2)
    with pytest.raises(ValueError, match=r'img_scale must be a tuple \(h, w\)'):
        Mosaic(img_scale=[640, 640])


def test_mixup_by_hand(monkeypatch):
    # jitter 1 (no rescale), flip, offsets (y 2, x 0): the partner 10 x 20 fits at ratio 1
    _draws(monkeypatch, [1.0, 0.0], [2])
    res = _item(8, 20, 100, [[0, 0, 4, 4]], [0])
    res['mix_results'] = [_item(10, 20, 50, [[0, 0, 5, 10]], [2])]
    out = MixUp(img_scale=(10, 20), ratio_range=(1, 1), flip_ratio=1.0)(res)
    assert out['img'].shape == (8, 20, 3) and (out['img'] == 75).all()
    # flipped: x in [15, 20]; shifted up by 2 and clipped to 8 rows
    np.testing.assert_array_equal(out['gt_bboxes'], [[0, 0, 4, 4], [15, 0, 20, 8]])
    assert out['gt_labels'].tolist() == [0, 2]


def test_mixup_partner_without_boxes_and_indexes():
    res = _item(8, 8, 1, [[0, 0, 4, 4]], [0])
    res['mix_results'] = [_item(8, 8, 2, [], [])]
    out = MixUp(img_scale=(8, 8))(res)
    assert (out['img'] == 1).all() and len(out['gt_bboxes']) == 1

    class Anns:
        def __len__(self):
            return 5

        def get_ann_info(self, i):
            return dict(bboxes=np.zeros((int(i == 3), 4)))
    np.random.seed(1)
    assert {MixUp(max_iters=50).get_indexes(Anns()) for _ in range(5)} == {3}
    with pytest.raises(ValueError, match='max_iters must be a positive int'):
        MixUp(max_iters=0)
