"""COCO-format detection data: ``CocoDataset`` (mmdet 2.x's arguments, behaviour and metric
keys) on pycocotools' ``COCO`` and ``COCOeval``.

Fixes over mmdet 2.28.2, names kept:

- labels follow the order of ``CLASSES`` (mmdet followed the order of the json's categories,
  so ``classes`` listed in another order, or naming a category the json lacks, gave objects the
  wrong label); a class name matching no category is allowed (it gets no objects), two
  categories with one name, or no class found at all, is an error;
- the json is checked when it is read: a missing image file, an annotation of an unknown
  image or category id, a malformed bbox or a duplicate id is an error naming the file and the
  entry (mmdet failed later, or silently trained on wrong data);
- results with no detection at all evaluate to 0 AP (mmdet logged an error and returned no
  metric, which broke ``save_best``);
- ``get_cat_ids`` returns labels, as every other dataset (mmdet returned COCO category ids);
- with ``LoadAnnotations(with_mask=True)`` the masks training reads are checked when the
  dataset is built (:meth:`CocoDataset.check_mask_annotations`);
- a training set none of whose images has a box to train on (every annotation a crowd, say)
  is refused by ``build_dataloader`` naming the json (mmdet trained it with every box and mask
  loss 0);
- segm results may hold bool masks or RLE dicts (mmdet needed RLE) and are not modified.

``min_size`` (default 32, mmdet's fixed value) is the shortest image side kept in training.
"""
import contextlib
import io
import itertools
import json
import numbers
import os.path as osp
import tempfile
from collections import OrderedDict, defaultdict

import numpy as np
from mmengine.fileio import dump
from mmengine.logging import print_log
from pycocotools.coco import COCO as _COCO
from pycocotools import mask as mask_utils
from pycocotools.cocoeval import COCOeval

from ..registry import DATASETS
from .coco_check import check_coco_json, check_coco_masks, no_objects_message
from .custom import CustomDataset

__all__ = ['COCO', 'COCOeval', 'CocoDataset']

#: ``cocoEval.stats`` index of each metric item (as mmdet 2.x).
COCO_METRIC_NAMES = {'mAP': 0, 'mAP_50': 1, 'mAP_75': 2, 'mAP_s': 3, 'mAP_m': 4, 'mAP_l': 5,
                     'AR@100': 6, 'AR@300': 7, 'AR@1000': 8, 'AR_s@1000': 9, 'AR_m@1000': 10,
                     'AR_l@1000': 11}


class COCO(_COCO):
    """pycocotools' COCO with mmdet's snake-case aliases, built from an already-read dict."""

    def __init__(self, annotation_file=None, dataset=None):
        if dataset is None:
            super().__init__(annotation_file)
        else:
            super().__init__()
            self.dataset = dataset
            self.createIndex()
        self.img_ann_map = self.imgToAnns
        self.cat_img_map = self.catToImgs

    def get_ann_ids(self, img_ids=[], cat_ids=[], area_rng=[], iscrowd=None):
        return self.getAnnIds(img_ids, cat_ids, area_rng, iscrowd)

    def get_cat_ids(self, cat_names=[], sup_names=[], cat_ids=[]):
        return self.getCatIds(cat_names, sup_names, cat_ids)

    def get_img_ids(self, img_ids=[], cat_ids=[]):
        return self.getImgIds(img_ids, cat_ids)

    def load_anns(self, ids):
        return self.loadAnns(ids)

    def load_cats(self, ids):
        return self.loadCats(ids)

    def load_imgs(self, ids):
        return self.loadImgs(ids)


def _rle_json(mask):
    """A mask as COCO json's RLE: ``counts`` a str."""
    if isinstance(mask, dict):
        rle = dict(mask)
    else:
        mask = np.asarray(mask)
        if mask.ndim != 2:
            raise ValueError(f'a mask result is an (H, W) array or an RLE dict, got shape '
                             f'{mask.shape}')
        rle = mask_utils.encode(np.asfortranarray(mask.astype(np.uint8)))
    if isinstance(rle.get('counts'), bytes):
        rle['counts'] = rle['counts'].decode()
    return rle


@DATASETS.register_module()
class CocoDataset(CustomDataset):
    """COCO detection (mmdet 2.x). ``ann_file`` is a COCO instances json; images are
    ``img_prefix/<file_name>``. Crowd boxes (``iscrowd``) become ``bboxes_ignore``; boxes
    with ``ignore``, no overlap with the image, ``area <= 0``, width or height < 1, or a
    category not in ``CLASSES`` are dropped. Training drops images with a short side below
    ``min_size`` and, with ``filter_empty_gt``, images with no annotation of a class in
    ``CLASSES`` (crowd ones count, as in mmdet)."""

    #: the ``metric`` values ``evaluate`` takes (mmdet 2.x's 'proposal_fast' is not
    #: implemented: no fast recall)
    METRICS = ('bbox', 'segm', 'proposal')
    CLASSES = ('person', 'bicycle', 'car', 'motorcycle', 'airplane', 'bus', 'train', 'truck',
               'boat', 'traffic light', 'fire hydrant', 'stop sign', 'parking meter', 'bench',
               'bird', 'cat', 'dog', 'horse', 'sheep', 'cow', 'elephant', 'bear', 'zebra',
               'giraffe', 'backpack', 'umbrella', 'handbag', 'tie', 'suitcase', 'frisbee',
               'skis', 'snowboard', 'sports ball', 'kite', 'baseball bat', 'baseball glove',
               'skateboard', 'surfboard', 'tennis racket', 'bottle', 'wine glass', 'cup',
               'fork', 'knife', 'spoon', 'bowl', 'banana', 'apple', 'sandwich', 'orange',
               'broccoli', 'carrot', 'hot dog', 'pizza', 'donut', 'cake', 'chair', 'couch',
               'potted plant', 'bed', 'dining table', 'toilet', 'tv', 'laptop', 'mouse',
               'remote', 'keyboard', 'cell phone', 'microwave', 'oven', 'toaster', 'sink',
               'refrigerator', 'book', 'clock', 'vase', 'scissors', 'teddy bear', 'hair drier',
               'toothbrush')

    def __init__(self, ann_file, pipeline, min_size=32, **kwargs):
        if not isinstance(min_size, numbers.Real) or isinstance(min_size, bool) or min_size < 0:
            raise ValueError(f'min_size must be a non-negative number, got {min_size!r}')
        self.min_size = self.min_img_size = min_size
        self._file_client_args = kwargs.get('file_client_args', dict(backend='disk'))
        super().__init__(ann_file, pipeline, **kwargs)

    def load_annotations(self, ann_file):
        try:
            with open(ann_file, encoding='utf-8') as f:
                data = json.load(f)
        except json.JSONDecodeError as e:
            raise ValueError(f'COCO json {ann_file!r} is not valid json: {e}') from e
        data = self._adapt_json(data, ann_file)
        local = (self._file_client_args or {}).get('backend', 'disk') == 'disk'
        check_coco_json(data, ann_file, self.img_prefix if local else None)
        with contextlib.redirect_stdout(io.StringIO()):  # pycocotools prints its timing
            self.coco = COCO(dataset=data)

        by_name = defaultdict(list)
        for cat in data['categories']:
            by_name[cat['name']].append(cat['id'])
        self.cat2label, self.label2cat = {}, {}
        for label, name in enumerate(self.CLASSES or ()):
            ids = by_name.get(name, [])
            if len(ids) > 1:
                raise ValueError(f'COCO json {ann_file!r}: class {name!r} names the categories '
                                 f'{ids}; a class must name one')
            if ids:
                self.cat2label[ids[0]] = label
                self.label2cat[label] = ids[0]
        if not self.cat2label:
            raise ValueError(f'COCO json {ann_file!r}: none of the classes '
                             f'{list(self.CLASSES or ())[:5]}... is a category of the json '
                             f'({sorted(by_name)[:10]})')
        #: category ids of the classes found, in the order of ``CLASSES``
        self.cat_ids = [self.label2cat[label] for label in sorted(self.label2cat)]
        self.img_ids = self.coco.get_img_ids()
        data_infos = []
        for img_id in self.img_ids:
            info = dict(self.coco.load_imgs([img_id])[0])
            info['filename'] = info['file_name']
            data_infos.append(info)
        return data_infos

    def _adapt_json(self, data, ann_file):
        """The json as read, before it is checked: a variant of the format (Objects365 v2's
        file names, LVIS v1's ``coco_url``) rewrites it here into COCO's."""
        return data

    def get_ann_info(self, idx):
        img_id = self.data_infos[idx]['id']
        ann_info = self.coco.load_anns(self.coco.get_ann_ids(img_ids=[img_id]))
        return self._parse_ann_info(self.data_infos[idx], ann_info)

    def get_cat_ids(self, idx):
        """The labels of the image's annotations of known classes (crowd ones included)."""
        img_id = self.data_infos[idx]['id']
        anns = self.coco.load_anns(self.coco.get_ann_ids(img_ids=[img_id]))
        return [self.cat2label[a['category_id']] for a in anns
                if a['category_id'] in self.cat2label]

    def _filter_imgs(self, min_size=None):
        min_size = self.min_size if min_size is None else min_size
        ids_in_cat = set()
        for cat_id in self.cat_ids:
            ids_in_cat |= set(self.coco.cat_img_map[cat_id])
        valid_inds, valid_img_ids = [], []
        for i, info in enumerate(self.data_infos):
            img_id = self.img_ids[i]
            if self.filter_empty_gt and img_id not in ids_in_cat:
                continue
            if min(info['width'], info['height']) >= min_size:
                valid_inds.append(i)
                valid_img_ids.append(img_id)
        self.img_ids = valid_img_ids
        return valid_inds

    def _no_objects_message(self):
        """Why no training image has a box to train on, or None:
        :func:`.coco_check.no_objects_message`."""
        return no_objects_message(self)

    def _kept_anns(self, img_info, ann_info):
        """``(ann, [x1, y1, x2, y2], is_crowd)`` of the annotations training keeps."""
        for ann in ann_info:
            if ann.get('ignore', False):
                continue
            x1, y1, w, h = ann['bbox']
            inter_w = max(0, min(x1 + w, img_info['width']) - max(x1, 0))
            inter_h = max(0, min(y1 + h, img_info['height']) - max(y1, 0))
            if inter_w * inter_h == 0:
                continue
            if ann.get('area', w * h) <= 0 or w < 1 or h < 1:
                continue
            if ann['category_id'] not in self.cat2label:
                continue
            yield ann, [x1, y1, x1 + w, y1 + h], bool(ann.get('iscrowd', False))

    def _parse_ann_info(self, img_info, ann_info):
        gt_bboxes, gt_labels, gt_bboxes_ignore, gt_masks_ann = [], [], [], []
        for ann, bbox, crowd in self._kept_anns(img_info, ann_info):
            if crowd:
                gt_bboxes_ignore.append(bbox)
            else:
                gt_bboxes.append(bbox)
                gt_labels.append(self.cat2label[ann['category_id']])
                gt_masks_ann.append(ann.get('segmentation', None))
        return dict(
            bboxes=np.array(gt_bboxes, dtype=np.float32).reshape(-1, 4),
            labels=np.array(gt_labels, dtype=np.int64),
            bboxes_ignore=np.array(gt_bboxes_ignore, dtype=np.float32).reshape(-1, 4),
            masks=gt_masks_ann,
            seg_map=img_info['filename'].rsplit('.', 1)[0] + self.seg_suffix)

    def check_mask_annotations(self):
        """The masks of the objects training reads: :func:`.coco_check.check_coco_masks`."""
        check_coco_masks(self)

    @staticmethod
    def xyxy2xywh(bbox):
        b = bbox.tolist()
        return [b[0], b[1], b[2] - b[0], b[3] - b[1]]

    def _proposal2json(self, results):
        return [dict(image_id=img_id, bbox=self.xyxy2xywh(box), score=float(box[4]),
                     category_id=1)
                for img_id, boxes in zip(self.img_ids, results) for box in boxes]

    def _det2json(self, results):
        """Detections of a class with no category in the json are left out (they cannot be
        named in COCO's format)."""
        out = []
        for img_id, result in zip(self.img_ids, results):
            for label, boxes in enumerate(result):
                if label not in self.label2cat:
                    continue
                for box in boxes:
                    out.append(dict(image_id=img_id, bbox=self.xyxy2xywh(box),
                                    score=float(box[4]), category_id=self.label2cat[label]))
        return out

    def _segm2json(self, results):
        """``(bbox_json, segm_json)`` of ``(bbox_results, segm_results)`` per image: a segm
        entry per box, scored by the box (or by ``mask_scores`` of a ``(segms, mask_scores)``
        pair), its mask a bool ``(H, W)`` array (RLE-encoded here) or an RLE dict."""
        bbox_json, segm_json = [], []
        for idx, (img_id, (det, seg)) in enumerate(zip(self.img_ids, results)):
            segms, mask_scores = seg if isinstance(seg, tuple) else (seg, None)
            if len(segms) != len(det):
                raise ValueError(f'image {idx}: {len(det)} classes of boxes but {len(segms)} '
                                 f'of masks')
            for label, boxes in enumerate(det):
                if len(segms[label]) != len(boxes):
                    raise ValueError(f'image {idx}, class {label}: {len(boxes)} boxes but '
                                     f'{len(segms[label])} masks')
                if label not in self.label2cat:
                    continue
                cat_id = self.label2cat[label]
                for i, box in enumerate(boxes):
                    bbox = self.xyxy2xywh(box)
                    bbox_json.append(dict(image_id=img_id, bbox=bbox, score=float(box[4]),
                                          category_id=cat_id))
                    score = box[4] if mask_scores is None else mask_scores[label][i]
                    segm_json.append(dict(image_id=img_id, bbox=bbox, score=float(score),
                                          category_id=cat_id,
                                          segmentation=_rle_json(segms[label][i])))
        return bbox_json, segm_json

    def results2json(self, results, outfile_prefix):
        """Write ``<prefix>.bbox.json`` (detections: per image, a list per class of [k, 5]
        arrays), also ``<prefix>.segm.json`` for instance segmentation (per image a
        ``(bbox_results, segm_results)`` tuple), or ``<prefix>.proposal.json`` (per image one
        [k, 5] array); returns the paths by kind (``bbox`` and ``proposal`` name the same
        file for detections)."""
        if isinstance(results[0], list):
            path = f'{outfile_prefix}.bbox.json'
            dump(self._det2json(results), path)
            return dict(bbox=path, proposal=path)
        if isinstance(results[0], tuple):
            bbox_json, segm_json = self._segm2json(results)
            files = dict(bbox=f'{outfile_prefix}.bbox.json',
                         proposal=f'{outfile_prefix}.bbox.json',
                         segm=f'{outfile_prefix}.segm.json')
            dump(bbox_json, files['bbox'])
            dump(segm_json, files['segm'])
            return files
        if isinstance(results[0], np.ndarray):
            path = f'{outfile_prefix}.proposal.json'
            dump(self._proposal2json(results), path)
            return dict(proposal=path)
        raise TypeError(f'results must hold per-image lists (detections), (bbox, segm) tuples '
                        f'(instance segmentation) or arrays (proposals), got '
                        f'{type(results[0]).__name__}')

    def format_results(self, results, jsonfile_prefix=None, **kwargs):
        """Write the results as COCO json; returns ``(result_files, tmp_dir)``, ``tmp_dir``
        the TemporaryDirectory used when ``jsonfile_prefix`` is None (else None)."""
        if not isinstance(results, list):
            raise TypeError(f'results must be a list, got {type(results).__name__}')
        if len(results) != len(self):
            raise ValueError(f'got results for {len(results)} images, the dataset has '
                             f'{len(self)}')
        tmp_dir = None
        if jsonfile_prefix is None:
            tmp_dir = tempfile.TemporaryDirectory()
            jsonfile_prefix = osp.join(tmp_dir.name, 'results')
        return self.results2json(results, jsonfile_prefix), tmp_dir

    def _load_results(self, path, iou_type='bbox'):
        with open(path, encoding='utf-8') as f:
            predictions = json.load(f)
        if iou_type == 'segm':
            # as mmdet: without 'bbox' pycocotools takes a prediction's area from its mask,
            # not its box (the small / medium / large APs; the overall AP is the same)
            for p in predictions:
                p.pop('bbox', None)
        with contextlib.redirect_stdout(io.StringIO()):
            if predictions:
                return self.coco.loadRes(predictions)
            # no detection at all: an empty result set scores 0 AP (pycocotools' loadRes
            # cannot take an empty list)
            empty = COCO(dataset=dict(images=self.coco.dataset['images'],
                                      categories=self.coco.dataset['categories'],
                                      annotations=[]))
        return empty

    def _check_gt_masks(self):
        """Mask AP needs every ground-truth object of the evaluated images to have a mask."""
        ids = set(self.img_ids)
        missing = [a['id'] for a in self.coco.dataset.get('annotations', [])
                   if a['image_id'] in ids and a.get('segmentation') is None]
        if missing:
            raise ValueError(f"metric 'segm' needs the ground-truth masks, but annotation ids "
                             f"{missing[:5]} ({len(missing)} in all) of COCO json "
                             f"{self.ann_file!r} have no 'segmentation'")

    def _classwise_table(self, coco_eval):
        from terminaltables import AsciiTable
        precisions = coco_eval.eval['precision']  # iou, recall, cls, area range, max dets
        rows = []
        for idx, cat_id in enumerate(self.cat_ids):
            precision = precisions[:, :, idx, 0, -1]
            precision = precision[precision > -1]
            ap = np.mean(precision) if precision.size else float('nan')
            rows.append((f'{self.coco.load_cats(cat_id)[0]["name"]}', f'{float(ap):0.3f}'))
        num_columns = min(6, len(rows) * 2)
        flat = list(itertools.chain(*rows))
        table = [['category', 'AP'] * (num_columns // 2)]
        table += list(itertools.zip_longest(*[flat[i::num_columns]
                                              for i in range(num_columns)]))
        return AsciiTable(table).table

    def evaluate(self, results, metric='bbox', logger=None, jsonfile_prefix=None,
                 classwise=False, proposal_nums=(100, 300, 1000), iou_thrs=None,
                 metric_items=None):
        """COCO evaluation by pycocotools' ``COCOeval``, printing its summary (and, with
        ``classwise``, the AP of each class). Returns ``bbox_mAP``, ``bbox_mAP_50``,
        ``bbox_mAP_75``, ``bbox_mAP_s/m/l`` (4 decimals) and ``bbox_mAP_copypaste`` for
        ``metric='bbox'``, the same ``segm_*`` keys for ``'segm'`` (``iouType='segm'`` on
        ``(bbox, segm)`` results, as mmdet); ``AR@100`` ... for ``'proposal'``;
        ``metric_items`` picks others among :data:`COCO_METRIC_NAMES`. ``iou_thrs`` default
        0.50:0.05:0.95."""
        metrics = metric if isinstance(metric, list) else [metric]
        allowed = ('bbox', 'segm', 'proposal', 'proposal_fast')
        for m in metrics:
            if m not in allowed:
                raise KeyError(f'metric {m!r} is not supported; supported: {list(allowed)}')
            if m == 'proposal_fast':
                raise NotImplementedError("metric 'proposal_fast' is not implemented in "
                                          "ckptzoo (no fast recall); use 'proposal'")
        if 'segm' in metrics:
            self._check_gt_masks()
        if metric_items is not None:
            metric_items = metric_items if isinstance(metric_items, list) else [metric_items]
            for item in metric_items:
                if item not in COCO_METRIC_NAMES:
                    raise KeyError(f'metric item {item!r} is not supported; supported: '
                                   f'{list(COCO_METRIC_NAMES)}')
        if iou_thrs is None:
            iou_thrs = np.linspace(.5, 0.95, int(np.round((0.95 - .5) / .05)) + 1,
                                   endpoint=True)
        # an array: pycocotools' summarize compares it with ==, which a list turns into a bool
        iou_thrs = np.asarray(iou_thrs, dtype=np.float64).reshape(-1)

        result_files, tmp_dir = self.format_results(results, jsonfile_prefix)
        eval_results = OrderedDict()
        try:
            for m in metrics:
                msg = f'Evaluating {m}...'
                print_log(msg if logger is not None else '\n' + msg, logger=logger)
                if m not in result_files:
                    raise KeyError(f'{m} is not in the results (got {sorted(result_files)})')
                iou_type = 'segm' if m == 'segm' else 'bbox'
                coco_eval = COCOeval(self.coco, self._load_results(result_files[m], iou_type),
                                     iou_type)
                coco_eval.params.catIds = self.cat_ids
                coco_eval.params.imgIds = self.img_ids
                coco_eval.params.maxDets = list(proposal_nums)
                coco_eval.params.iouThrs = iou_thrs
                if m == 'proposal':
                    coco_eval.params.useCats = 0
                summary = io.StringIO()
                with contextlib.redirect_stdout(summary):
                    coco_eval.evaluate()
                    coco_eval.accumulate()
                    summary.truncate(0)
                    summary.seek(0)
                    coco_eval.summarize()
                print_log('\n' + summary.getvalue(), logger=logger)
                if m == 'proposal':
                    items = metric_items or ['AR@100', 'AR@300', 'AR@1000', 'AR_s@1000',
                                             'AR_m@1000', 'AR_l@1000']
                    for item in items:
                        eval_results[item] = float(
                            f'{coco_eval.stats[COCO_METRIC_NAMES[item]]:.4f}')
                    continue
                if classwise:
                    print_log('\n' + self._classwise_table(coco_eval), logger=logger)
                items = metric_items or ['mAP', 'mAP_50', 'mAP_75', 'mAP_s', 'mAP_m', 'mAP_l']
                for item in items:
                    eval_results[f'{m}_{item}'] = float(
                        f'{coco_eval.stats[COCO_METRIC_NAMES[item]]:.4f}')
                ap = coco_eval.stats[:6]
                eval_results[f'{m}_mAP_copypaste'] = ' '.join(f'{v:.4f}' for v in ap)
        finally:
            if tmp_dir is not None:
                tmp_dir.cleanup()
        return eval_results
