"""Open Images mean AP (mmdet 2.x's ``eval_map`` with ``use_group_of=True``, its
``tpfp_openimages``): the Open Images Challenge protocol.

Per class and image, detections are taken in descending score. Against the boxes that are not
group-of, matching is as VOC's (IoU >= ``iou_thr`` with the best gt: a TP if that gt is not yet
matched, else an FP; below the threshold an FP). A detection that is not a TP and covers a
group-of box (intersection over the *detection's* area >= ``ioa_thr``) is not counted on its
own: each group-of box hit by any detection counts as one TP, scored by the highest of them,
and a group-of box hit by none adds one FP at score 0 (as mmdet: it lowers the precision tail
only, the AP is unchanged by it). Every gt box, group-of or not, counts in the recall.

Only the whole-image range is supported (``scale_ranges=None``): mmdet's ranged variant kept the
last range's detections for every range.
"""
import numpy as np

from .voc_map import average_precision, bbox_overlaps, get_cls_results, print_map_summary

__all__ = ['tpfp_openimages', 'eval_openimages_map']


def tpfp_openimages(det_bboxes, gt_bboxes, gt_is_group_of=None, iou_thr=0.5, ioa_thr=0.5,
                    use_group_of=True):
    """``(tp, fp, dets)`` of one image and class: ``[k]`` flags for ``dets``, the detections
    as counted (the group-of matched ones replaced by one per group-of box)."""
    det_bboxes = np.asarray(det_bboxes, dtype=np.float32).reshape(-1, 5)
    gt_bboxes = np.asarray(gt_bboxes, dtype=np.float32).reshape(-1, 4)
    num_dets = det_bboxes.shape[0]
    tp = np.zeros(num_dets, dtype=np.float32)
    fp = np.zeros(num_dets, dtype=np.float32)
    if gt_bboxes.shape[0] == 0:
        fp[:] = 1
        return tp, fp, det_bboxes
    if use_group_of and gt_is_group_of is not None:
        group = np.asarray(gt_is_group_of, dtype=bool).reshape(-1)
        if group.shape[0] != gt_bboxes.shape[0]:
            raise ValueError(f'gt_is_group_of has {group.shape[0]} flags for '
                             f'{gt_bboxes.shape[0]} boxes')
        ious = bbox_overlaps(det_bboxes, gt_bboxes[~group])
        ioas = bbox_overlaps(det_bboxes, gt_bboxes[group], mode='iof')
    else:
        ious, ioas = bbox_overlaps(det_bboxes, gt_bboxes), None
    order = np.argsort(-det_bboxes[:, -1])
    if ious.shape[1] > 0:
        ious_max, ious_argmax = ious.max(axis=1), ious.argmax(axis=1)
        covered = np.zeros(ious.shape[1], dtype=bool)
        for i in order:
            if ious_max[i] >= iou_thr:
                g = ious_argmax[i]
                if not covered[g]:
                    covered[g] = True
                    tp[i] = 1
                else:
                    fp[i] = 1
            else:
                fp[i] = 1
    else:
        fp[:] = 1
    if ioas is None or ioas.shape[1] == 0:
        return tp, fp, det_bboxes
    num_group = ioas.shape[1]
    group_dets = np.zeros((num_group, 5), dtype=np.float32)
    group_tp = np.zeros(num_group, dtype=np.float32)
    on_group = np.zeros(num_dets, dtype=bool)
    ioas_max, ioas_argmax = ioas.max(axis=1), ioas.argmax(axis=1)
    for i in order:
        if not tp[i] and ioas_max[i] >= ioa_thr:
            g = ioas_argmax[i]
            group_tp[g] = 1
            on_group[i] = True
            if group_dets[g, -1] < det_bboxes[i, -1]:
                group_dets[g] = det_bboxes[i]
    group_fp = (group_tp <= 0).astype(float)  # float64 (upcasts fp), as mmdet
    return (np.concatenate((tp[~on_group], group_tp)),
            np.concatenate((fp[~on_group], group_fp)),
            np.concatenate((det_bboxes[~on_group], group_dets)))


def eval_openimages_map(det_results, annotations, iou_thr=0.5, ioa_thr=0.5, dataset=None,
                        logger=None, use_group_of=True, scale_ranges=None):
    """``(mean_ap, eval_results)`` as ``eval_map``'s; ``annotations`` carry
    ``gt_is_group_ofs`` beside ``bboxes`` / ``labels``. Area AP; the mean over classes with a
    gt box."""
    if scale_ranges is not None:
        raise NotImplementedError('the Open Images mAP takes no scale_ranges (only the whole '
                                  'image range is implemented)')
    if len(det_results) != len(annotations):
        raise ValueError(f'det_results has {len(det_results)} images but annotations has '
                         f'{len(annotations)}')
    if use_group_of and ioa_thr is None:
        raise ValueError('ioa_thr must be set when use_group_of=True')
    num_classes = len(det_results[0])
    eval_results = []
    for c in range(num_classes):
        cls_dets, cls_gts, _ = get_cls_results(det_results, annotations, c)
        groups = [np.asarray(a.get('gt_is_group_ofs', np.zeros(len(a['labels']), bool)),
                             dtype=bool)[np.asarray(a['labels']) == c] for a in annotations]
        tpfp = [tpfp_openimages(d, g, grp, iou_thr, ioa_thr, use_group_of)
                for d, g, grp in zip(cls_dets, cls_gts, groups)]
        tp, fp, dets = zip(*tpfp)
        num_gts = sum(g.shape[0] for g in cls_gts)
        dets = np.vstack(dets)
        order = np.argsort(-dets[:, -1])
        tp = np.cumsum(np.hstack(tp)[order])
        fp = np.cumsum(np.hstack(fp)[order])
        eps = np.finfo(np.float32).eps
        recalls = tp / np.maximum(np.int64(num_gts), eps)  # float64, as mmdet
        precisions = tp / np.maximum(tp + fp, eps)
        eval_results.append(dict(num_gts=num_gts, num_dets=dets.shape[0], recall=recalls,
                                 precision=precisions,
                                 ap=average_precision(recalls, precisions, 'area')))
    aps = [r['ap'] for r in eval_results if r['num_gts'] > 0]
    mean_ap = float(np.mean(aps)) if aps else 0.0
    print_map_summary(mean_ap, eval_results, dataset, None, logger=logger)
    return mean_ap, eval_results
