"""Panoptic quality on hand-made maps, each number computed by hand from the definition
(Kirillov et al. 2019; COCO's panopticapi): match = same category and IoU > 0.5, the union
without the prediction's VOID pixels, crowds neither matched nor false negatives, a prediction
mostly on VOID / its category's crowd not a false positive."""
import numpy as np
import pytest

from ckptzoo.evaluation.panoptic_quality import (INSTANCE_OFFSET, OFFSET, VOID, PQStat,
                                                 id2rgb, parse_pq_results,
                                                 pq_compute_single_image, rgb2id)

THING, STUFF = 1, 7
CATS = {THING: dict(id=THING, name='thing', isthing=1), STUFF: dict(id=STUFF, name='stuff',
                                                                     isthing=0)}


def _ann(segs, crowd=()):
    return dict(image_id=1, segments_info=[
        dict(id=i, category_id=c, iscrowd=int(i in crowd), area=a) for i, c, a in segs])


def _gt(pan, cats, crowd=()):
    ids, counts = np.unique(pan, return_counts=True)
    return _ann([(i, cats[i], n) for i, n in zip(ids.tolist(), counts.tolist()) if i != VOID],
                crowd)


def _pred(pan, cats):
    return _ann([(i, cats[i], 0) for i in np.unique(pan).tolist() if i != VOID])


def test_constants_and_ids():
    assert (VOID, OFFSET, INSTANCE_OFFSET) == (0, 256 ** 3, 1000)
    ids = np.array([[0, 1, 256], [65536, 16777215, 8345037]])
    rgb = id2rgb(ids)
    assert rgb.dtype == np.uint8 and rgb[0, 2].tolist() == [0, 1, 0]
    back = rgb2id(rgb)
    assert back.dtype == np.int32 and np.array_equal(back, ids)
    assert rgb2id([1, 2, 3]) == 1 + 2 * 256 + 3 * 65536


def test_match_iou_and_averages():
    # 1 x 10 image: gt thing 10 (8 px), gt stuff 20 (2 px)
    gt = np.array([[10] * 8 + [20] * 2])
    # pred thing 5 on px 2..9 (6 shared with gt 10): IoU 6 / (8 + 8 - 6) = 0.6 -> TP
    # pred stuff 6 on px 0..1: no overlap with gt 20 -> FP; gt 20 -> FN
    pred = np.array([[6] * 2 + [5] * 8])
    stat = pq_compute_single_image(_gt(gt, {10: THING, 20: STUFF}),
                                   _pred(pred, {5: THING, 6: STUFF}), gt, pred, CATS)
    t, s = stat[THING], stat[STUFF]
    assert (t.tp, t.fp, t.fn, s.tp, s.fp, s.fn) == (1, 0, 0, 0, 1, 1)
    assert t.iou == pytest.approx(0.6)
    all_, per_class = stat.pq_average(CATS, isthing=None)
    # thing: PQ = SQ = 0.6, RQ 1; stuff: PQ 0 = 0 / (0 + .5 + .5), SQ 0, RQ 0; n = 2
    assert all_ == pytest.approx(dict(pq=0.3, sq=0.3, rq=0.5, n=2))
    assert per_class[THING] == pytest.approx(dict(pq=0.6, sq=0.6, rq=1.0))
    things, _ = stat.pq_average(CATS, isthing=True)
    stuff, _ = stat.pq_average(CATS, isthing=False)
    assert things == pytest.approx(dict(pq=0.6, sq=0.6, rq=1.0, n=1))
    assert stuff == pytest.approx(dict(pq=0.0, sq=0.0, rq=0.0, n=1))
    res = parse_pq_results(dict(All=all_, Things=things, Stuff=stuff))
    assert res == pytest.approx(dict(PQ=30.0, SQ=30.0, RQ=50.0, PQ_th=60.0, SQ_th=60.0,
                                     RQ_th=100.0, PQ_st=0.0, SQ_st=0.0, RQ_st=0.0))


def test_iou_of_exactly_half_is_no_match_and_category_must_agree():
    gt = np.array([[10] * 4 + [11] * 4])
    # pred 5 covers gt 10's 4 px + 4 px of gt 11: IoU 4 / 8 = 0.5 -> not a match
    pred = np.array([[5] * 8])
    stat = pq_compute_single_image(_gt(gt, {10: THING, 11: STUFF}), _pred(pred, {5: THING}),
                                   gt, pred, CATS)
    assert (stat[THING].tp, stat[THING].fp, stat[THING].fn, stat[STUFF].fn) == (0, 1, 1, 1)
    # a perfect mask of the wrong category: FP of one, FN of the other
    gt = np.array([[10] * 8])
    stat = pq_compute_single_image(_gt(gt, {10: THING}), _pred(gt, {10: STUFF}), gt, gt, CATS)
    assert (stat[THING].fn, stat[STUFF].fp, stat[THING].tp) == (1, 1, 0)


def test_void_pixels_leave_the_union():
    # gt thing 10 on 4 px, 4 px VOID; pred 5 covers all 8 px:
    # union = 8 + 4 - 4 - 4 (pred on VOID) = 4 -> IoU 1
    gt = np.array([[10] * 4 + [VOID] * 4])
    pred = np.array([[5] * 8])
    stat = pq_compute_single_image(_gt(gt, {10: THING}), _pred(pred, {5: THING}), gt, pred,
                                   CATS)
    assert (stat[THING].tp, stat[THING].fp, stat[THING].iou) == (1, 0, 1.0)
    # an unmatched prediction 6 px on VOID out of 10: not a false positive (> half)
    gt = np.array([[10] * 4 + [VOID] * 6 + [11] * 6])
    pred = np.array([[5] * 10 + [8] * 6])
    stat = pq_compute_single_image(_gt(gt, {10: THING, 11: STUFF}),
                                   _pred(pred, {5: THING, 8: STUFF}), gt, pred, CATS)
    # pred 5 vs gt 10: IoU 4 / (10 + 4 - 4 - 6) = 1 -> TP in fact; the void rule for FPs:
    assert stat[THING].tp == 1
    pred = np.array([[5] * 4 + [6] * 6 + [8] * 6])  # 6 on VOID only: ignored
    stat = pq_compute_single_image(_gt(gt, {10: THING, 11: STUFF}),
                                   _pred(pred, {5: THING, 6: STUFF, 8: STUFF}), gt, pred, CATS)
    assert (stat[THING].tp, stat[STUFF].tp, stat[STUFF].fp) == (1, 1, 0)
    # 3 of 6 px on VOID is not more than half: a false positive (pred 8 matches gt 11:
    # IoU 7 / 10)
    gt = np.array([[10] * 4 + [VOID] * 6 + [11] * 10])
    pred = np.array([[5] * 4 + [VOID] * 3 + [6] * 6 + [8] * 7])
    stat = pq_compute_single_image(_gt(gt, {10: THING, 11: STUFF}),
                                   _pred(pred, {5: THING, 6: STUFF, 8: STUFF}), gt, pred, CATS)
    assert (stat[STUFF].tp, stat[STUFF].fp, stat[STUFF].fn) == (1, 1, 0)
    assert stat[STUFF].iou == pytest.approx(0.7)


def test_crowd_is_ignored():
    # gt: thing 10 (4 px), crowd 30 of the thing class (6 px)
    gt = np.array([[10] * 4 + [30] * 6])
    # pred 5 matches 10; pred 6 (thing) on 4 crowd px of its 4: ignored, crowd no FN
    pred = np.array([[5] * 4 + [6] * 4 + [VOID] * 2])
    stat = pq_compute_single_image(_gt(gt, {10: THING, 30: THING}, crowd=(30,)),
                                   _pred(pred, {5: THING, 6: THING}), gt, pred, CATS)
    assert (stat[THING].tp, stat[THING].fp, stat[THING].fn) == (1, 0, 0)
    # a crowd is never matched: a perfect prediction of it is ignored, not a TP
    pred = np.array([[5] * 4 + [6] * 6])
    stat = pq_compute_single_image(_gt(gt, {10: THING, 30: THING}, crowd=(30,)),
                                   _pred(pred, {5: THING, 6: THING}), gt, pred, CATS)
    assert (stat[THING].tp, stat[THING].fp) == (1, 0)
    # the crowd of another category does not excuse a prediction
    stat = pq_compute_single_image(_gt(gt, {10: THING, 30: THING}, crowd=(30,)),
                                   _pred(pred, {5: THING, 6: STUFF}), gt, pred, CATS)
    assert stat[STUFF].fp == 1


def test_several_images_add_up():
    gt = np.array([[10] * 8])
    pred = np.array([[5] * 6 + [VOID] * 2])  # IoU 6 / 8
    stat = PQStat()
    for _ in range(2):
        pq_compute_single_image(_gt(gt, {10: THING}), _pred(pred, {5: THING}), gt, pred,
                                CATS, stat)
    pq_compute_single_image(_gt(gt, {10: THING}), _ann([]), gt, np.zeros_like(gt), CATS,
                            stat)
    t = stat[THING]
    assert (t.tp, t.fn, t.fp) == (2, 1, 0) and t.iou == pytest.approx(1.5)
    res, _ = stat.pq_average(CATS, isthing=True)
    # PQ = 1.5 / (2 + 0.5), SQ = 0.75, RQ = 2 / 2.5
    assert res == pytest.approx(dict(pq=0.6, sq=0.75, rq=0.8, n=1))


def test_no_counted_category_is_zero_not_a_crash():
    res, per_class = PQStat().pq_average(CATS, isthing=False)
    assert res == dict(pq=0.0, sq=0.0, rq=0.0, n=0)
    assert per_class[STUFF] == dict(pq=0.0, sq=0.0, rq=0.0)


def test_bad_predictions_name_the_image():
    gt = np.array([[10] * 4])
    pred = np.array([[5] * 4])
    with pytest.raises(KeyError, match='image 1: the predicted segment id 5 is in the PNG'):
        pq_compute_single_image(_gt(gt, {10: THING}), _ann([]), gt, pred, CATS)
    with pytest.raises(KeyError, match=r'\[9\] are in segments_info but not in the PNG'):
        pq_compute_single_image(_gt(gt, {10: THING}), _ann([(5, THING, 0), (9, THING, 0)]),
                                gt, pred, CATS)
    with pytest.raises(KeyError, match='unknown category_id 4'):
        pq_compute_single_image(_gt(gt, {10: THING}), _ann([(5, 4, 0)]), gt, pred, CATS)
    with pytest.raises(ValueError, match='image 1: the predicted panoptic map'):
        pq_compute_single_image(_gt(gt, {10: THING}), _pred(pred, {5: THING}), gt,
                                np.array([[5] * 5]), CATS)
