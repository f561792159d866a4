import logging

import numpy as np
import pytest

from ckptzoo.evaluation import average_precision, bbox_overlaps, eval_map
from ckptzoo.evaluation.voc_map import tpfp_default


def _dets(*rows):
    return np.array(rows, dtype=np.float32).reshape(-1, 5)


def _boxes(*rows):
    return np.array(rows, dtype=np.float32).reshape(-1, 4)


def _mixed_case():
    """3 classes, 2 images.

    class 0: image A has gts G1=[0,0,10,10], G2=[20,20,30,30] and a difficult D=[40,40,50,50];
    image B has G3=[0,0,10,10]. Detections by score: 0.9 on G1 (TP), 0.8 on D (ignored),
    0.7 on G1 again (FP, duplicate), 0.65 on G3 (TP), 0.6 on nothing (FP); G2 missed.
    -> cum tp 1,1,1,2,2; fp 0,0,1,1,2; recall 1/3,1/3,1/3,2/3,2/3;
       precision 1,1,1/2,2/3,1/2.
       area AP = 1/3 * 1 + 1/3 * 2/3 = 5/9; 11-point AP = (4 * 1 + 3 * 2/3) / 11 = 6/11.
    class 1: one gt in B, no detection -> AP 0, counts in the mean.
    class 2: no gt, one detection -> left out of the mean.
    """
    det_a = [_dets([0, 0, 10, 10, 0.9], [40, 40, 50, 50, 0.8], [0, 0, 10, 10, 0.7]),
             _dets(), _dets([60, 60, 70, 70, 0.3])]
    det_b = [_dets([0, 0, 10, 10, 0.65], [100, 100, 110, 110, 0.6]), _dets(), _dets()]
    ann_a = dict(bboxes=_boxes([0, 0, 10, 10], [20, 20, 30, 30]), labels=np.array([0, 0]),
                 bboxes_ignore=_boxes([40, 40, 50, 50]), labels_ignore=np.array([0]))
    ann_b = dict(bboxes=_boxes([0, 0, 10, 10], [50, 50, 60, 60]), labels=np.array([0, 1]),
                 bboxes_ignore=_boxes(), labels_ignore=np.zeros(0, dtype=np.int64))
    return [det_a, det_b], [ann_a, ann_b]


@pytest.mark.parametrize('legacy', [False, True])
def test_mixed_case_matches_hand_computation(legacy):
    dets, anns = _mixed_case()
    mean_ap, results = eval_map(dets, anns, logger='silent', use_legacy_coordinate=legacy)
    assert results[0]['num_gts'] == 3 and results[0]['num_dets'] == 5
    np.testing.assert_allclose(results[0]['recall'], [1 / 3, 1 / 3, 1 / 3, 2 / 3, 2 / 3],
                               rtol=1e-6)
    np.testing.assert_allclose(results[0]['precision'], [1, 1, 1 / 2, 2 / 3, 1 / 2], rtol=1e-6)
    assert results[0]['ap'] == pytest.approx(5 / 9, abs=1e-6)
    assert results[1]['num_gts'] == 1 and results[1]['ap'] == 0
    assert results[2]['num_gts'] == 0
    assert mean_ap == pytest.approx((5 / 9 + 0) / 2, abs=1e-6)

    mean_ap11, results11 = eval_map(dets, anns, dataset='voc07', logger='silent',
                                    use_legacy_coordinate=legacy)
    assert results11[0]['ap'] == pytest.approx(6 / 11, abs=1e-6)
    assert mean_ap11 == pytest.approx(6 / 11 / 2, abs=1e-6)
    # eval_mode overrides what dataset implies
    mean_ap_e, _ = eval_map(dets, anns, dataset=('a', 'b', 'c'), eval_mode='11points',
                            logger='silent')
    assert mean_ap_e == pytest.approx(mean_ap11, abs=1e-7)


def test_difficult_match_is_neither_tp_nor_fp():
    dets, anns = _mixed_case()
    a = anns[0]
    tp, fp = tpfp_default(dets[0][0], a['bboxes'], a['bboxes_ignore'], iou_thr=0.5)
    np.testing.assert_array_equal(tp, [[1, 0, 0]])
    np.testing.assert_array_equal(fp, [[0, 0, 1]])
    # the same box as an ordinary gt would make the 0.8 detection a TP
    tp, fp = tpfp_default(dets[0][0], np.vstack([a['bboxes'], a['bboxes_ignore']]), None)
    np.testing.assert_array_equal(tp, [[1, 1, 0]])
    np.testing.assert_array_equal(fp, [[0, 0, 1]])


def test_each_gt_matched_once_in_score_order_not_input_order():
    gt = _boxes([0, 0, 10, 10])
    # the low-score detection comes first in the array; the high-score one must win
    tp, fp = tpfp_default(_dets([0, 0, 10, 10, 0.1], [0, 0, 10, 10, 0.9]), gt)
    np.testing.assert_array_equal(tp, [[0, 1]])
    np.testing.assert_array_equal(fp, [[1, 0]])


def test_iou_threshold_boundary():
    gt = _boxes([0, 0, 10, 10])
    det = _dets([0, 0, 10, 5, 0.9])  # IoU 0.5 exactly
    assert bbox_overlaps(det, gt)[0, 0] == pytest.approx(0.5)
    assert tpfp_default(det, gt, iou_thr=0.5)[0][0, 0] == 1
    assert tpfp_default(det, gt, iou_thr=0.51)[1][0, 0] == 1
    # legacy (+1) coordinates: (11 * 6) / (11 * 11)
    assert bbox_overlaps(det, gt, use_legacy_coordinate=True)[0, 0] == pytest.approx(6 / 11)


def test_perfect_and_empty_predictions():
    rng = np.random.default_rng(0)
    anns, perfect, empty = [], [], []
    for _ in range(5):
        xy = rng.uniform(0, 50, size=(3, 2))
        wh = rng.uniform(5, 30, size=(3, 2))
        boxes = np.hstack([xy, xy + wh]).astype(np.float32)
        labels = rng.integers(0, 2, size=3)
        anns.append(dict(bboxes=boxes, labels=labels))
        perfect.append([np.hstack([boxes[labels == c], np.full((np.sum(labels == c), 1), 0.5,
                                                               np.float32)])
                        for c in range(2)])
        empty.append([_dets(), _dets()])
    for mode in (None, 'voc07'):
        assert eval_map(perfect, anns, dataset=mode, logger='silent')[0] == pytest.approx(1.0)
        assert eval_map(empty, anns, dataset=mode, logger='silent')[0] == 0.0


def test_average_precision_modes():
    rec = np.array([0.5, 1.0])
    prec = np.array([1.0, 0.5])
    assert average_precision(rec, prec, 'area') == pytest.approx(0.5 * 1 + 0.5 * 0.5)
    # thresholds 0..0.5 (6) -> 1.0; 0.6..1.0 (5) -> 0.5
    assert average_precision(rec, prec, '11points') == pytest.approx((6 + 2.5) / 11)
    both = average_precision(np.stack([rec, rec]), np.stack([prec, prec]))
    assert both.shape == (2,)
    with pytest.raises(ValueError, match='11points'):
        average_precision(rec, prec, 'bad')


def test_scale_ranges():
    dets = [[_dets([0, 0, 4, 4, 0.9], [10, 10, 30, 30, 0.8])]]
    anns = [dict(bboxes=_boxes([0, 0, 4, 4], [10, 10, 30, 30]), labels=np.array([0, 0]))]
    mean_ap, res = eval_map(dets, anns, scale_ranges=[(0, 10), (10, 100)], logger='silent')
    assert res[0]['num_gts'].tolist() == [1, 1]
    assert mean_ap == pytest.approx([1.0, 1.0])


def test_table_goes_to_logger(caplog):
    dets, anns = _mixed_case()
    logger = logging.getLogger('voc_map_test')
    with caplog.at_level(logging.INFO, logger='voc_map_test'):
        eval_map(dets, anns, dataset=('circle', 'square', 'triangle'), logger=logger)
    text = caplog.text
    assert 'circle' in text and 'triangle' in text and 'mAP' in text and '0.278' in text


def test_bad_inputs():
    dets, anns = _mixed_case()
    with pytest.raises(ValueError, match='2 images'):
        eval_map(dets, anns[:1], logger='silent')
    with pytest.raises(ValueError, match='eval_mode'):
        eval_map(dets, anns, eval_mode='bad', logger='silent')


class _RecordingPool:
    """A Pool that maps in-process and records how it was ended."""

    def __init__(self, calls, fail):
        self.calls, self.fail = calls, fail

    def map(self, fn, args):
        if self.fail:
            raise KeyboardInterrupt
        return [fn(a) for a in args]

    def close(self):
        self.calls.append('close')

    def join(self):
        self.calls.append('join')

    def terminate(self):
        self.calls.append('terminate')


@pytest.mark.parametrize('fail', [False, True])
def test_the_pool_is_closed_and_joined_terminated_only_on_error(monkeypatch, fail):
    """terminate() ends the workers with SIGTERM: only on an error (or a stop). mmdet 2.x only
    closes the pool, and its garbage collection then terminates the workers still running."""
    from ckptzoo.evaluation import voc_map
    calls = []

    class Context:
        def Pool(self, nproc):
            return _RecordingPool(calls, fail)

    monkeypatch.setattr(voc_map, 'get_context', lambda method: Context())
    dets, anns = _mixed_case()
    if fail:
        with pytest.raises(KeyboardInterrupt):
            eval_map(dets * 50, anns * 50, logger='silent', nproc=2)
        assert calls == ['terminate']
    else:
        mean_ap, _ = eval_map(dets * 50, anns * 50, logger='silent', nproc=2)  # 100 images
        assert calls == ['close', 'join']
        assert mean_ap == eval_map(dets * 50, anns * 50, logger='silent', nproc=1)[0]
