"""Panoptic quality (Kirillov et al., "Panoptic Segmentation", CVPR 2019), computed as COCO's
``panopticapi`` (``pq_compute``) does, which mmdet 2.x calls; written here because panopticapi
is not on PyPI.

Per image, a ground-truth segment and a predicted one *match* when they have the same category
and IoU > 0.5 (matches are then unique); the union leaves out the predicted pixels that are
VOID in the ground truth. Crowd ground-truth segments are never matched nor counted as false
negatives; an unmatched prediction is not a false positive when more than half of it lies on
VOID plus the crowd region of its category. Per category
``PQ = sum(IoU of matches) / (TP + FP / 2 + FN / 2)``, ``SQ = sum(IoU) / TP``,
``RQ = TP / (TP + FP / 2 + FN / 2)``; the averages are over the categories with at least one
TP, FP or FN (``n``).

Fixes over panopticapi / mmdet, names kept: a split with no counted category (say no stuff
segment at all) averages to 0 with ``n = 0`` (panopticapi divides by zero); the errors name the
image and the file.
"""
import multiprocessing
import os.path as osp
from collections import defaultdict

import cv2
import numpy as np

from .panoptic_utils import INSTANCE_OFFSET  # noqa: F401 - mmdet's panoptic result ids

__all__ = ['VOID', 'OFFSET', 'INSTANCE_OFFSET', 'rgb2id', 'id2rgb', 'PQStatCat', 'PQStat',
           'pq_compute_single_image', 'pq_compute', 'parse_pq_results']

#: the segment id of unlabeled pixels in a COCO panoptic PNG
VOID = 0
#: ``gt_id * OFFSET + pred_id`` pairs two 24-bit segment ids in one integer
OFFSET = 256 * 256 * 256


def rgb2id(color):
    """COCO panoptic's segment id of an RGB colour: ``R + 256 G + 256**2 B`` (an ``(H, W, 3)``
    RGB uint8 array gives an ``(H, W)`` int32 array)."""
    if isinstance(color, np.ndarray) and color.ndim == 3:
        if color.dtype == np.uint8:  # int32 as panopticapi (ids < 256**3)
            color = color.astype(np.int32)
        return color[..., 0] + 256 * color[..., 1] + 256 * 256 * color[..., 2]
    return int(color[0]) + 256 * int(color[1]) + 256 * 256 * int(color[2])


def id2rgb(id_map):
    """The inverse of :func:`rgb2id`: an ``(H, W, 3)`` uint8 RGB array (ids < 256**3)."""
    id_map = np.asarray(id_map, dtype=np.int64)
    return np.stack([id_map % 256, id_map // 256 % 256, id_map // 65536 % 256],
                    axis=-1).astype(np.uint8)


def read_id_map(path, where):
    """The segment ids of a panoptic PNG (an error naming ``where`` and the file)."""
    try:
        buf = np.fromfile(path, dtype=np.uint8)
    except OSError as e:
        raise FileNotFoundError(f'{where}: cannot read the panoptic PNG {path!r}: {e}') \
            from None
    img = cv2.imdecode(buf, cv2.IMREAD_COLOR)
    if img is None:
        raise OSError(f'{where}: cannot decode the panoptic PNG {path!r}')
    return rgb2id(img[:, :, ::-1])


class PQStatCat:
    """The counts of one category: summed IoU of matches, TP, FP, FN."""

    def __init__(self):
        self.iou = 0.0
        self.tp = 0
        self.fp = 0
        self.fn = 0

    def __iadd__(self, other):
        self.iou += other.iou
        self.tp += other.tp
        self.fp += other.fp
        self.fn += other.fn
        return self


class PQStat:
    """``PQStatCat`` per category id; ``pq_average`` as panopticapi's."""

    def __init__(self):
        self.pq_per_cat = defaultdict(PQStatCat)

    def __getitem__(self, cat_id):
        return self.pq_per_cat[cat_id]

    def __iadd__(self, other):
        for cat_id, stat in other.pq_per_cat.items():
            self.pq_per_cat[cat_id] += stat
        return self

    def pq_average(self, categories, isthing=None):
        """``({'pq', 'sq', 'rq', 'n'}, {cat_id: {'pq', 'sq', 'rq'}})`` over ``categories``
        (``{cat_id: {'isthing': 0/1, ...}}``): all (``isthing=None``), things or stuff. A
        category with no TP, FP nor FN gets zeros and is not averaged."""
        pq = sq = rq = 0.0
        n = 0
        per_class = {}
        for cat_id, info in categories.items():
            if isthing is not None and bool(info['isthing']) != isthing:
                continue
            s = self.pq_per_cat[cat_id]
            if s.tp + s.fp + s.fn == 0:
                per_class[cat_id] = dict(pq=0.0, sq=0.0, rq=0.0)
                continue
            n += 1
            denom = s.tp + 0.5 * s.fp + 0.5 * s.fn
            per_class[cat_id] = dict(pq=s.iou / denom, sq=s.iou / s.tp if s.tp else 0.0,
                                     rq=s.tp / denom)
            pq += per_class[cat_id]['pq']
            sq += per_class[cat_id]['sq']
            rq += per_class[cat_id]['rq']
        if n == 0:
            return dict(pq=0.0, sq=0.0, rq=0.0, n=0), per_class
        return dict(pq=pq / n, sq=sq / n, rq=rq / n, n=n), per_class


def pq_compute_single_image(gt_ann, pred_ann, pan_gt, pan_pred, categories, pq_stat=None):
    """Add one image's counts to ``pq_stat`` (a new ``PQStat`` when None) and return it.

    ``gt_ann`` / ``pred_ann``: ``{'image_id', 'segments_info': [{'id', 'category_id',
    'iscrowd' (gt), 'area' (gt)}]}``; ``pan_gt`` / ``pan_pred``: ``(H, W)`` segment-id maps.
    The prediction's areas are counted from its map. A predicted id in the map but not in its
    segments (or the reverse), or an unknown category, is an error naming the image."""
    pq_stat = PQStat() if pq_stat is None else pq_stat
    img_id = gt_ann.get('image_id')
    if pan_gt.shape != pan_pred.shape:
        raise ValueError(f'image {img_id}: the predicted panoptic map is {pan_pred.shape}, the '
                         f'ground truth {pan_gt.shape}')
    gt_segms = {s['id']: dict(s) for s in gt_ann['segments_info']}
    pred_segms = {s['id']: dict(s) for s in pred_ann['segments_info']}
    labels, counts = np.unique(pan_pred, return_counts=True)
    unlisted = set(pred_segms)
    for label, count in zip(labels.tolist(), counts.tolist()):
        if label not in pred_segms:
            if label == VOID:
                continue
            raise KeyError(f'image {img_id}: the predicted segment id {label} is in the PNG '
                           f'but not in the segments_info of the prediction')
        pred_segms[label]['area'] = count
        unlisted.discard(label)
        if pred_segms[label]['category_id'] not in categories:
            raise KeyError(f'image {img_id}: predicted segment {label} has an unknown '
                           f'category_id {pred_segms[label]["category_id"]} (known: '
                           f'{sorted(categories)})')
    if unlisted:
        raise KeyError(f'image {img_id}: the predicted segment ids {sorted(unlisted)} are in '
                       f'segments_info but not in the PNG')

    pair = pan_gt.astype(np.uint64) * OFFSET + pan_pred.astype(np.uint64)
    labels, counts = np.unique(pair, return_counts=True)
    inter = {(int(p // OFFSET), int(p % OFFSET)): int(c) for p, c in zip(labels, counts)}

    gt_matched, pred_matched = set(), set()
    for (gt_id, pred_id), intersection in inter.items():
        gt, pred = gt_segms.get(gt_id), pred_segms.get(pred_id)
        if gt is None or pred is None or gt.get('iscrowd', 0) == 1 or \
                gt['category_id'] != pred['category_id']:
            continue
        union = pred['area'] + gt['area'] - intersection - inter.get((VOID, pred_id), 0)
        iou = intersection / union
        if iou > 0.5:
            pq_stat[gt['category_id']].tp += 1
            pq_stat[gt['category_id']].iou += iou
            gt_matched.add(gt_id)
            pred_matched.add(pred_id)

    crowd_by_cat = {}
    for gt_id, gt in gt_segms.items():
        if gt_id in gt_matched:
            continue
        if gt.get('iscrowd', 0) == 1:
            crowd_by_cat[gt['category_id']] = gt_id
            continue
        pq_stat[gt['category_id']].fn += 1

    for pred_id, pred in pred_segms.items():
        if pred_id in pred_matched:
            continue
        ignored = inter.get((VOID, pred_id), 0)
        if pred['category_id'] in crowd_by_cat:
            ignored += inter.get((crowd_by_cat[pred['category_id']], pred_id), 0)
        if ignored / pred['area'] > 0.5:
            continue
        pq_stat[pred['category_id']].fp += 1
    return pq_stat


def _compute_chunk(pairs, gt_folder, pred_folder, categories):
    pq_stat = PQStat()
    for gt_ann, pred_ann in pairs:
        where = f'image {gt_ann.get("image_id")}'
        pan_gt = read_id_map(osp.join(gt_folder, gt_ann['file_name']), where + ' (ground truth)')
        pan_pred = read_id_map(osp.join(pred_folder, pred_ann['file_name']),
                               where + ' (prediction)')
        pq_compute_single_image(gt_ann, pred_ann, pan_gt, pan_pred, categories, pq_stat)
    return pq_stat


def pq_compute(matched_annotations, gt_folder, pred_folder, categories, nproc=1):
    """The ``PQStat`` of ``[(gt_ann, pred_ann)]`` whose PNGs (``file_name``) lie in
    ``gt_folder`` / ``pred_folder``; ``nproc`` worker processes (at most the CPU count; one
    when there are few images)."""
    matched_annotations = list(matched_annotations)
    workers = max(1, min(int(nproc), multiprocessing.cpu_count(),
                         len(matched_annotations) // 16))
    if workers == 1:
        return _compute_chunk(matched_annotations, gt_folder, pred_folder, categories)
    chunks = [matched_annotations[i::workers] for i in range(workers)]
    with multiprocessing.Pool(workers) as pool:
        stats = pool.starmap(_compute_chunk,
                             [(c, gt_folder, pred_folder, categories) for c in chunks])
    total = PQStat()
    for s in stats:
        total += s
    return total


def parse_pq_results(pq_results):
    """mmdet's result keys (percent): ``PQ SQ RQ`` (all), ``PQ_th SQ_th RQ_th`` (things),
    ``PQ_st SQ_st RQ_st`` (stuff) of ``{'All', 'Things', 'Stuff'}`` averages."""
    out = {}
    for name, suffix in (('All', ''), ('Things', '_th'), ('Stuff', '_st')):
        for key in ('pq', 'sq', 'rq'):
            out[f'{key.upper()}{suffix}'] = 100 * pq_results[name][key]
    return out
