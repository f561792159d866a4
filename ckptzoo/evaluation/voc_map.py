"""Pascal VOC mean average precision with mmdet 2.x's ``eval_map`` interface and semantics.

VOC devkit matching: per class and image, detections are taken in descending score; each is
matched to the ground truth of highest IoU; if that IoU >= ``iou_thr`` and the gt is
"difficult" (``bboxes_ignore``) the detection is neither TP nor FP; otherwise it is a TP if the
gt is not yet matched, else an FP. A detection below ``iou_thr`` is an FP. Recall counts only
non-difficult gts.
"""
from multiprocessing import get_context

import numpy as np
from mmengine.logging import print_log


def bbox_overlaps(bboxes1, bboxes2, mode='iou', eps=1e-6, use_legacy_coordinate=False):
    """IoU (or IoF: intersection over ``bboxes1``'s area) of two box sets, ``[n, m]``.
    ``use_legacy_coordinate`` adds 1 to widths and heights (pixel-inclusive, VOC devkit)."""
    if mode not in ('iou', 'iof'):
        raise ValueError(f"mode must be 'iou' or 'iof', got {mode!r}")
    extra = 1.0 if use_legacy_coordinate else 0.0
    b1 = np.asarray(bboxes1, dtype=np.float32)[:, None, :4]
    b2 = np.asarray(bboxes2, dtype=np.float32)[None, :, :4]
    if b1.shape[0] * b2.shape[1] == 0:
        return np.zeros((b1.shape[0], b2.shape[1]), dtype=np.float32)
    area1 = (b1[..., 2] - b1[..., 0] + extra) * (b1[..., 3] - b1[..., 1] + extra)
    area2 = (b2[..., 2] - b2[..., 0] + extra) * (b2[..., 3] - b2[..., 1] + extra)
    iw = np.maximum(np.minimum(b1[..., 2], b2[..., 2]) - np.maximum(b1[..., 0], b2[..., 0])
                    + extra, 0)
    ih = np.maximum(np.minimum(b1[..., 3], b2[..., 3]) - np.maximum(b1[..., 1], b2[..., 1])
                    + extra, 0)
    overlap = iw * ih
    union = area1 + area2 - overlap if mode == 'iou' else np.broadcast_to(area1, overlap.shape)
    return (overlap / np.maximum(union, eps)).astype(np.float32)


def average_precision(recalls, precisions, mode='area'):
    """AP from cumulative recalls/precisions (``[k]`` or ``[num_scales, k]``).

    ``'area'``: area under the precision envelope (VOC2010+); ``'11points'``: mean of the
    maximum precision at recall >= 0, 0.1, ..., 1 (VOC2007)."""
    recalls = np.asarray(recalls)
    precisions = np.asarray(precisions)
    no_scale = recalls.ndim == 1
    if no_scale:
        recalls, precisions = recalls[None, :], precisions[None, :]
    if recalls.shape != precisions.shape or recalls.ndim != 2:
        raise ValueError(f'recalls and precisions must have the same 1-D or 2-D shape, got '
                         f'{recalls.shape} and {precisions.shape}')
    num_scales = recalls.shape[0]
    ap = np.zeros(num_scales, dtype=np.float32)
    if mode == 'area':
        zeros = np.zeros((num_scales, 1), dtype=recalls.dtype)
        ones = np.ones((num_scales, 1), dtype=recalls.dtype)
        mrec = np.hstack((zeros, recalls, ones))
        mpre = np.hstack((zeros, precisions, zeros))
        mpre = np.flip(np.maximum.accumulate(np.flip(mpre, axis=1), axis=1), axis=1)
        for i in range(num_scales):
            ind = np.where(mrec[i, 1:] != mrec[i, :-1])[0]
            ap[i] = np.sum((mrec[i, ind + 1] - mrec[i, ind]) * mpre[i, ind + 1])
    elif mode == '11points':
        for i in range(num_scales):
            for thr in np.arange(0, 1 + 1e-3, 0.1):
                precs = precisions[i, recalls[i, :] >= thr]
                ap[i] += precs.max() if precs.size > 0 else 0
        ap /= 11
    else:
        raise ValueError(f"mode must be 'area' or '11points', got {mode!r}")
    return ap[0] if no_scale else ap


def tpfp_default(det_bboxes, gt_bboxes, gt_bboxes_ignore=None, iou_thr=0.5, area_ranges=None,
                 use_legacy_coordinate=False):
    """TP/FP flags ``[num_scales, num_dets]`` (float32) of one image and class, in the order of
    ``det_bboxes`` (devkit semantics, see the module docstring)."""
    extra = 1.0 if use_legacy_coordinate else 0.0
    det_bboxes = np.asarray(det_bboxes, dtype=np.float32).reshape(-1, 5)
    gt_bboxes = np.asarray(gt_bboxes, dtype=np.float32).reshape(-1, 4)
    if gt_bboxes_ignore is None:
        gt_bboxes_ignore = np.zeros((0, 4), dtype=np.float32)
    gt_bboxes_ignore = np.asarray(gt_bboxes_ignore, dtype=np.float32).reshape(-1, 4)
    gt_ignore = np.concatenate((np.zeros(len(gt_bboxes), dtype=bool),
                                np.ones(len(gt_bboxes_ignore), dtype=bool)))
    gts = np.vstack((gt_bboxes, gt_bboxes_ignore))
    num_dets, num_gts = det_bboxes.shape[0], gts.shape[0]
    if area_ranges is None:
        area_ranges = [(None, None)]
    tp = np.zeros((len(area_ranges), num_dets), dtype=np.float32)
    fp = np.zeros((len(area_ranges), num_dets), dtype=np.float32)
    det_areas = ((det_bboxes[:, 2] - det_bboxes[:, 0] + extra) *
                 (det_bboxes[:, 3] - det_bboxes[:, 1] + extra))
    if num_gts == 0:
        for k, (lo, hi) in enumerate(area_ranges):
            fp[k] = 1 if lo is None else ((det_areas >= lo) & (det_areas < hi))
        return tp, fp
    ious = bbox_overlaps(det_bboxes, gts, use_legacy_coordinate=use_legacy_coordinate)
    ious_max = ious.max(axis=1)
    ious_argmax = ious.argmax(axis=1)
    order = np.argsort(-det_bboxes[:, -1], kind='stable')
    gt_areas = (gts[:, 2] - gts[:, 0] + extra) * (gts[:, 3] - gts[:, 1] + extra)
    for k, (lo, hi) in enumerate(area_ranges):
        covered = np.zeros(num_gts, dtype=bool)
        area_ignore = (np.zeros(num_gts, dtype=bool) if lo is None
                       else (gt_areas < lo) | (gt_areas >= hi))
        for i in order:
            if ious_max[i] >= iou_thr:
                g = ious_argmax[i]
                if gt_ignore[g] or area_ignore[g]:
                    continue  # matched a difficult/out-of-range gt: neither TP nor FP
                if not covered[g]:
                    covered[g] = True
                    tp[k, i] = 1
                else:
                    fp[k, i] = 1
            elif lo is None or lo <= det_areas[i] < hi:
                fp[k, i] = 1
    return tp, fp


def get_cls_results(det_results, annotations, class_id):
    cls_dets = [np.asarray(img_res[class_id], dtype=np.float32).reshape(-1, 5)
                for img_res in det_results]
    cls_gts, cls_gts_ignore = [], []
    for ann in annotations:
        labels = np.asarray(ann['labels'])
        cls_gts.append(np.asarray(ann['bboxes'], dtype=np.float32).reshape(-1, 4)
                       [labels == class_id])
        if ann.get('labels_ignore', None) is not None:
            ign = np.asarray(ann['labels_ignore']) == class_id
            cls_gts_ignore.append(np.asarray(ann['bboxes_ignore'],
                                             dtype=np.float32).reshape(-1, 4)[ign])
        else:
            cls_gts_ignore.append(np.zeros((0, 4), dtype=np.float32))
    return cls_dets, cls_gts, cls_gts_ignore


def _tpfp_star(args):
    return tpfp_default(*args)


def eval_map(det_results, annotations, scale_ranges=None, iou_thr=0.5, dataset=None, logger=None,
             nproc=4, use_legacy_coordinate=False, eval_mode=None):
    """mmdet 2.x ``eval_map``.

    Args:
        det_results: per image, a list (per class) of ``[k, 5]`` arrays (x1, y1, x2, y2, score).
        annotations: per image, a dict with ``bboxes [n, 4]``, ``labels [n]`` (0-based) and
            optionally ``bboxes_ignore [m, 4]``, ``labels_ignore [m]`` (difficult boxes).
        scale_ranges: ``[(min, max), ...]`` of box sizes (sqrt of area); gts outside a range are
            ignored for it. None: one range covering everything.
        dataset: ``'voc07'`` selects 11-point AP; anything else (a name or the class names)
            area AP. The class names label the printed table.
        logger: where the per-class table goes (mmengine ``print_log``: None prints,
            ``'silent'`` prints nothing, a ``logging.Logger`` logs).
        nproc: worker processes for the per-image matching; 1 (or few images) runs in-process,
            since starting a pool costs more than it saves on small sets. The pool is closed
            and joined when done (mmdet 2.x only closes it, and its garbage collection then
            sends SIGTERM to workers still running); it is terminated only on an error.
        use_legacy_coordinate: +1 in widths/heights (VOC devkit's pixel-inclusive boxes).
        eval_mode: ``'area'`` or ``'11points'``; None picks from ``dataset`` as above (so
            ``dataset`` can carry the class names while ``eval_mode='11points'``).

    Returns:
        ``(mean_ap, eval_results)``: mean AP over classes with at least one gt (a list per
        scale range when ``scale_ranges`` is set) and per class a dict with ``num_gts``,
        ``num_dets``, ``recall``, ``precision``, ``ap``.
    """
    if len(det_results) != len(annotations):
        raise ValueError(f'det_results has {len(det_results)} images but annotations has '
                         f'{len(annotations)}')
    num_imgs = len(det_results)
    if num_imgs == 0:
        raise ValueError('det_results is empty')
    num_scales = len(scale_ranges) if scale_ranges is not None else 1
    num_classes = len(det_results[0])
    if any(len(r) != num_classes for r in det_results):
        raise ValueError(f'every image needs {num_classes} per-class arrays, got '
                         f'{sorted(set(len(r) for r in det_results))}')
    extra = 1.0 if use_legacy_coordinate else 0.0
    area_ranges = ([(rg[0] ** 2, rg[1] ** 2) for rg in scale_ranges]
                   if scale_ranges is not None else None)
    pool = get_context('fork').Pool(nproc) if nproc > 1 and num_imgs >= 100 else None
    mode = eval_mode or ('11points' if dataset == 'voc07' else 'area')
    if mode not in ('area', '11points'):
        raise ValueError(f"eval_mode must be 'area' or '11points', got {eval_mode!r}")
    eval_results = []
    try:
        for i in range(num_classes):
            cls_dets, cls_gts, cls_gts_ignore = get_cls_results(det_results, annotations, i)
            args = [(d, g, gi, iou_thr, area_ranges, use_legacy_coordinate)
                    for d, g, gi in zip(cls_dets, cls_gts, cls_gts_ignore)]
            tpfp = pool.map(_tpfp_star, args) if pool else [_tpfp_star(a) for a in args]
            tp, fp = zip(*tpfp)
            num_gts = np.zeros(num_scales, dtype=int)
            for bbox in cls_gts:
                if area_ranges is None:
                    num_gts[0] += bbox.shape[0]
                else:
                    areas = ((bbox[:, 2] - bbox[:, 0] + extra) *
                             (bbox[:, 3] - bbox[:, 1] + extra))
                    for k, (lo, hi) in enumerate(area_ranges):
                        num_gts[k] += np.sum((areas >= lo) & (areas < hi))
            dets = np.vstack(cls_dets)
            order = np.argsort(-dets[:, -1], kind='stable')
            tp = np.cumsum(np.hstack(tp)[:, order], axis=1)
            fp = np.cumsum(np.hstack(fp)[:, order], axis=1)
            eps = np.finfo(np.float32).eps
            recalls = tp / np.maximum(num_gts[:, None], eps)
            precisions = tp / np.maximum(tp + fp, eps)
            if scale_ranges is None:
                recalls, precisions, num_gts = recalls[0], precisions[0], num_gts.item()
            eval_results.append(dict(num_gts=num_gts, num_dets=dets.shape[0], recall=recalls,
                                     precision=precisions,
                                     ap=average_precision(recalls, precisions, mode)))
        if pool is not None:  # the workers take their stop sentinels and exit
            pool.close()
            pool.join()
    except BaseException:
        if pool is not None:  # an error or a stop: end the workers (SIGTERM)
            pool.terminate()
        raise
    if scale_ranges is not None:
        all_ap = np.vstack([r['ap'] for r in eval_results])
        all_gts = np.vstack([r['num_gts'] for r in eval_results])
        mean_ap = [float(all_ap[all_gts[:, k] > 0, k].mean()) if np.any(all_gts[:, k] > 0)
                   else 0.0 for k in range(num_scales)]
    else:
        aps = [r['ap'] for r in eval_results if r['num_gts'] > 0]
        mean_ap = float(np.mean(aps)) if aps else 0.0
    print_map_summary(mean_ap, eval_results, dataset, area_ranges, logger=logger)
    return mean_ap, eval_results


def print_map_summary(mean_ap, results, dataset=None, scale_ranges=None, logger=None):
    """Per-class table: gts, dets, recall, ap; then the mAP (per scale range if any)."""
    if logger == 'silent':
        return
    num_scales = len(results[0]['ap']) if isinstance(results[0]['ap'], np.ndarray) and \
        results[0]['ap'].ndim else 1
    if isinstance(dataset, (list, tuple)) and len(dataset) == len(results):
        names = [str(n) for n in dataset]
    else:
        names = [str(i) for i in range(len(results))]
    mean_aps = mean_ap if isinstance(mean_ap, list) else [mean_ap]
    for k in range(num_scales):
        if scale_ranges is not None:
            print_log(f'Scale range {scale_ranges[k]}', logger=logger)
        rows = [('class', 'gts', 'dets', 'recall', 'ap')]
        for name, r in zip(names, results):
            recall = np.atleast_2d(r['recall'])[k] if np.size(r['recall']) else np.zeros(0)
            gts = np.atleast_1d(r['num_gts'])[k]
            ap = np.atleast_1d(r['ap'])[k]
            rows.append((name, str(gts), str(r['num_dets']),
                         f'{recall[-1] if recall.size else 0.0:.3f}', f'{ap:.3f}'))
        rows.append(('mAP', '', '', '', f'{mean_aps[k]:.3f}'))
        widths = [max(len(row[c]) for row in rows) for c in range(5)]
        line = '+' + '+'.join('-' * (w + 2) for w in widths) + '+'
        text = [line]
        for j, row in enumerate(rows):
            text.append('| ' + ' | '.join(v.ljust(w) for v, w in zip(row, widths)) + ' |')
            if j in (0, len(rows) - 2):
                text.append(line)
        text.append(line)
        print_log('\n' + '\n'.join(text), logger=logger)
