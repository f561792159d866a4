"""Cityscapes instances in COCO format (mmdet 2.x's ``CityscapesDataset``), as mmdet's
``cityscapes_instance.py`` reads them (``instancesonly_filtered_gtFine_<split>.json``, images
under ``leftImg8bit/<split>/``).

Differences from ``CocoDataset``, mmdet's: in training an image is dropped when it has no
annotation of the 8 classes or when *all* its annotations are crowd ones; ``seg_map`` is the
image's ``segm_file`` (the json's). ``evaluate`` gives the COCO metrics over every image of the
json (mmdet's evaluate builds a ``CocoDataset`` on the same json) and ``'cityscapes'``, the
Cityscapes instance-level AP of ``cityscapesscripts`` (an optional package: ``pip install
cityscapesscripts==2.3.0``, the extra ``ckptzoo[cityscapes]``), keys ``mAP`` and ``AP@50``, as
mmdet: each mask written as a PNG with a ``<image>_pred.txt`` listing them, evaluated against
the ``gtFine/<split>/*/*_gtFine_instanceIds.png`` beside ``img_prefix``. Unlike mmdet, the
package's settings are a copy for the call (mmdet set its module-wide ``args``), and its
``matches.json`` goes to the results folder, not the working directory.

Fix over mmdet 2.28.2, whose ``evaluate`` defaulted ``iou_thrs`` to ``np.arange(0.5, 0.96,
0.05)``: its 0.75 is 0.7500000000000002, which pycocotools' summary does not find, so
``bbox_mAP_75`` / ``segm_mAP_75`` came out -1. The default here is COCO's 0.50:0.05:0.95 (as
``CocoDataset``'s); every other number is mmdet's.
"""
import contextlib
import copy
import glob
import io
import os
import os.path as osp
import tempfile
from collections import OrderedDict

import cv2
import numpy as np
from mmengine.logging import print_log
from pycocotools import mask as mask_utils

from ..registry import DATASETS
from .numpy_compat import patch_module
from .coco import CocoDataset


@DATASETS.register_module()
class CityscapesDataset(CocoDataset):
    """Cityscapes' 8 instance classes."""

    CLASSES = ('person', 'rider', 'car', 'truck', 'bus', 'train', 'motorcycle', 'bicycle')
    PALETTE = [(220, 20, 60), (255, 0, 0), (0, 0, 142), (0, 0, 70), (0, 60, 100),
               (0, 80, 100), (0, 0, 230), (119, 11, 32)]

    def _filter_imgs(self, min_size=None):
        min_size = self.min_size if min_size is None else min_size
        ids_in_cat = set()
        for cat_id in self.cat_ids:
            ids_in_cat |= set(self.coco.cat_img_map[cat_id])
        valid_inds, valid_img_ids = [], []
        for i, info in enumerate(self.data_infos):
            img_id = self.img_ids[i]
            anns = self.coco.img_ann_map.get(img_id, [])
            if self.filter_empty_gt and (img_id not in ids_in_cat
                                         or all(a.get('iscrowd', 0) for a in anns)):
                continue
            if min(info['width'], info['height']) >= min_size:
                valid_inds.append(i)
                valid_img_ids.append(img_id)
        self.img_ids = valid_img_ids
        return valid_inds

    def _parse_ann_info(self, img_info, ann_info):
        ann = super()._parse_ann_info(img_info, ann_info)
        if 'segm_file' in img_info:
            ann['seg_map'] = img_info['segm_file']
        return ann

    def evaluate(self, results, metric='bbox', logger=None, outfile_prefix=None,
                 classwise=False, proposal_nums=(100, 300, 1000), iou_thrs=None,
                 metric_items=None):
        """COCO metrics (``bbox``, ``segm``, ``proposal``) as ``CocoDataset``'s, mmdet's
        keys; ``outfile_prefix`` is the json prefix."""
        metrics = list(metric) if isinstance(metric, (list, tuple)) else [metric]
        eval_results = OrderedDict()
        if 'cityscapes' in metrics:
            metrics.remove('cityscapes')
            eval_results.update(self._evaluate_cityscapes(results, outfile_prefix, logger))
            if not metrics:
                return eval_results
        if not self.test_mode and len(self.img_ids) != len(self.coco.get_img_ids()):
            raise ValueError('CityscapesDataset.evaluate scores every image of the json (as '
                             'mmdet); build the dataset with test_mode=True')
        eval_results.update(super().evaluate(results, metrics, logger, outfile_prefix,
                                             classwise, proposal_nums, iou_thrs, metric_items))
        return eval_results

    def results2txt(self, results, outfile_prefix):
        """Per image ``<outfile_prefix>/<image>_pred.txt`` listing ``<mask png> <label id>
        <score>`` of each detection (the mask's score, else the box's); returns the txt
        paths."""
        labels_of = _cityscapes_labels()
        os.makedirs(outfile_prefix, exist_ok=True)
        files = []
        for idx, result in enumerate(results):
            if not isinstance(result, tuple) or len(result) != 2:
                raise TypeError("metric 'cityscapes' needs (bbox, segm) results per image")
            bbox_result, segm_result = result
            segms, mask_scores = segm_result if isinstance(segm_result, tuple) \
                else (segm_result, None)
            base = osp.splitext(osp.basename(self.data_infos[idx]['filename']))[0]
            lines, n = [], 0
            for label, boxes in enumerate(bbox_result):
                class_id = labels_of[self.CLASSES[label]].id
                for k, box in enumerate(boxes):
                    mask = segms[label][k]
                    mask = mask_utils.decode(mask) if isinstance(mask, dict) else mask
                    png = f'{base}_{n}_{self.CLASSES[label]}.png'
                    cv2.imwrite(osp.join(outfile_prefix, png), np.asarray(mask, np.uint8))
                    score = box[-1] if mask_scores is None else mask_scores[label][k]
                    lines.append(f'{png} {class_id} {score}\n')
                    n += 1
            files.append(osp.join(outfile_prefix, f'{base}_pred.txt'))
            with open(files[-1], 'w', encoding='utf-8') as f:
                f.writelines(lines)
        return files

    def _evaluate_cityscapes(self, results, txtfile_prefix, logger):
        try:
            import cityscapesscripts.evaluation.evalInstanceLevelSemanticLabeling as cs_eval
        except ImportError as e:
            raise ImportError("metric 'cityscapes' needs the cityscapesscripts package: pip "
                              "install cityscapesscripts==2.3.0 (or ckptzoo[cityscapes])") from e
        patch_module(cs_eval)  # it calls np.in1d, gone from numpy 2.4
        if len(results) != len(self):
            raise ValueError(f'got results for {len(results)} images, the dataset has '
                             f'{len(self)}')
        print_log(f'{"" if logger else chr(10)}Evaluating in Cityscapes style', logger=logger)
        tmp_dir = None
        if txtfile_prefix is None:
            tmp_dir = tempfile.TemporaryDirectory()
            txtfile_prefix = osp.join(tmp_dir.name, 'results')
        result_dir = osp.abspath(txtfile_prefix)
        try:
            self.results2txt(results, result_dir)
            args = copy.copy(cs_eval.args)
            args.cityscapesPath = osp.join(self.img_prefix, '../..')
            args.predictionPath = result_dir
            args.predictionWalk = None
            args.JSONOutput = False
            args.colorized = False
            args.quiet = logger == 'silent'
            args.gtInstancesFile = osp.join(result_dir, 'gtInstances.json')
            args.groundTruthSearch = osp.join(self.img_prefix.replace('leftImg8bit', 'gtFine'),
                                              '*/*_gtFine_instanceIds.png')
            gt_files = sorted(glob.glob(args.groundTruthSearch))
            if not gt_files:
                raise FileNotFoundError(f'no Cityscapes ground truth at '
                                        f'{args.groundTruthSearch}')
            summary = io.StringIO()
            with contextlib.chdir(result_dir), contextlib.redirect_stdout(summary):
                preds = [cs_eval.getPrediction(gt, args) for gt in gt_files]
                averages = cs_eval.evaluateImgLists(preds, gt_files, args)['averages']
            print_log(summary.getvalue(), logger=logger)
        finally:
            if tmp_dir is not None:
                tmp_dir.cleanup()
        return OrderedDict([('mAP', averages['allAp']), ('AP@50', averages['allAp50%'])])


def _cityscapes_labels():
    try:
        from cityscapesscripts.helpers.labels import name2label
    except ImportError as e:
        raise ImportError("metric 'cityscapes' needs the cityscapesscripts package: pip "
                          "install cityscapesscripts==2.3.0 (or ckptzoo[cityscapes])") from e
    return name2label
