"""LVIS v0.5 and v1 (mmdet 2.x's ``LVISV05Dataset`` / ``LVISDataset`` and ``LVISV1Dataset``):
COCO-format instance annotations of 1230 / 1203 classes, evaluated by the ``lvis`` package
(LVIS's own AP: ``APr`` / ``APc`` / ``APf`` by category frequency, 300 detections per image,
negative and not-exhaustive categories).

Files, as mmdet reads them: v0.5's ``file_name`` is COCO 2014's (``COCO_val2014_<12
digits>.jpg``) while the images are COCO 2017's, so the image is ``img_prefix/<12 digits>.jpg``;
v1 has no ``file_name`` and the image is the path of its ``coco_url`` (``train2017/<...>.jpg``)
under ``img_prefix`` (the data root).

``evaluate`` returns mmdet's keys: ``bbox_AP``, ``bbox_AP50``, ``bbox_AP75``, ``bbox_APs/m/l``,
``bbox_APr/c/f`` (4 decimals) and ``bbox_mAP_copypaste`` (``'AP:0.1234 AP50:...'``), the same
for ``segm``; ``AR@300`` ... for ``proposal``. Fixes over mmdet 2.28.2, names kept:

- ``proposal`` evaluates class-agnostic recall (pycocotools' ``COCOeval`` with ``useCats=0``
  on the same json, 300 proposals, LVIS's area ranges, mmdet's keys ``AR@300``, ``ARs@300``,
  ``ARm@300``, ``ARl@300``): mmdet set ``params.useCats``, a name the lvis package does not
  read (its ``use_cats=0`` fails in its summary), so proposals (all category 1) were matched
  to category 1's objects only;
- results with no detection at all give 0 for every AP (mmdet logged an error and returned no
  metric);
- the lvis package (0.5.3, the one the registry has) calls ``np.float``, gone from numpy 2:
  its ``eval`` module is given a numpy namespace with that alias (:mod:`.numpy_compat`).
"""
import contextlib
import io
import itertools
import json
from collections import OrderedDict

import numpy as np
from mmengine.logging import print_log

from ..registry import DATASETS
from .coco import CocoDataset
from .lvis_classes import LVISV05_CLASSES, LVISV1_CLASSES
from .numpy_compat import patch_module

LVIS_AP_KEYS = ('AP', 'AP50', 'AP75', 'APs', 'APm', 'APl', 'APr', 'APc', 'APf')


def _lvis_api():
    """``(LVIS, LVISEval, LVISResults)`` of the lvis package, its ``eval`` module working on
    numpy 2."""
    try:
        import lvis.eval as lvis_eval
        from lvis import LVIS, LVISEval, LVISResults
    except ImportError as e:
        raise ImportError(f'LVIS evaluation needs the lvis package (a ckptzoo requirement: '
                          f'pip install -c .ci/constraints.txt lvis): {e}') from e
    patch_module(lvis_eval)
    return LVIS, LVISEval, LVISResults


@DATASETS.register_module(name=['LVISV05Dataset', 'LVISDataset'])
class LVISV05Dataset(CocoDataset):
    """LVIS v0.5 instances; ``LVISDataset`` is the same class (mmdet's alias)."""

    CLASSES = LVISV05_CLASSES
    PALETTE = None

    def _adapt_json(self, data, ann_file):
        for ann in data.get('annotations', []):  # LVIS has no crowd; pycocotools reads the key
            ann.setdefault('iscrowd', 0)
        for img in data.get('images', []):
            name = img.get('file_name', '')
            if name.startswith('COCO'):  # COCO_val2014_000000391895.jpg -> 000000391895.jpg
                img['file_name'] = name[-16:]
        return data

    def _lvis_gt(self):
        LVIS = _lvis_api()[0]
        if getattr(self, '_lvis', None) is None:
            with contextlib.redirect_stdout(io.StringIO()):
                self._lvis = LVIS(self.ann_file)
        return self._lvis

    def _classwise_table(self, lvis_eval):
        from terminaltables import AsciiTable
        precisions = lvis_eval.eval['precision']  # iou, recall, cls, area range
        rows = []
        for idx, cat_id in enumerate(lvis_eval.params.cat_ids):
            precision = precisions[:, :, idx, 0]
            precision = precision[precision > -1]
            ap = np.mean(precision) if precision.size else float('nan')
            rows.append((self.coco.load_cats(cat_id)[0]['name'], f'{float(ap):0.3f}'))
        num_columns = min(6, len(rows) * 2)
        flat = list(itertools.chain(*rows))
        table = [['category', 'AP'] * (num_columns // 2)]
        table += list(itertools.zip_longest(*[flat[i::num_columns]
                                              for i in range(num_columns)]))
        return AsciiTable(table).table

    def evaluate(self, results, metric='bbox', logger=None, jsonfile_prefix=None,
                 classwise=False, proposal_nums=(100, 300, 1000), iou_thrs=None):
        """LVIS evaluation (see the module docstring). ``proposal_nums`` and ``iou_thrs`` are
        accepted for mmdet's signature; LVIS's are fixed (300 detections, 0.50:0.05:0.95),
        as in mmdet."""
        _, LVISEval, LVISResults = _lvis_api()
        metrics = list(metric) if isinstance(metric, (list, tuple)) else [metric]
        for m in metrics:
            if m not in ('bbox', 'segm', 'proposal', 'proposal_fast'):
                raise KeyError(f"metric {m!r} is not supported; supported: ['bbox', 'segm', "
                               f"'proposal']")
            if m == 'proposal_fast':
                raise NotImplementedError("metric 'proposal_fast' is not implemented in "
                                          "ckptzoo (no fast recall); use 'proposal'")
        eval_results = OrderedDict()
        if 'proposal' in metrics:
            metrics.remove('proposal')
            recall = CocoDataset.evaluate(
                self, results, 'proposal', logger, proposal_nums=(300, 300, 300),
                metric_items=['AR@1000', 'AR_s@1000', 'AR_m@1000', 'AR_l@1000'])
            for key, ours in zip(('AR@300', 'ARs@300', 'ARm@300', 'ARl@300'), recall.values()):
                eval_results[key] = ours
            if not metrics:
                return eval_results
        result_files, tmp_dir = self.format_results(results, jsonfile_prefix)
        lvis_gt = self._lvis_gt()
        try:
            for m in metrics:
                print_log(f'{"" if logger else chr(10)}Evaluating {m}...', logger=logger)
                if m not in result_files:
                    raise KeyError(f'{m} is not in the results (got {sorted(result_files)})')
                with open(result_files[m], encoding='utf-8') as f:
                    predictions = json.load(f)
                if not predictions:
                    print_log('no detection at all: every AP is 0', logger=logger)
                    eval_results.update((f'{m}_{k}', 0.0) for k in LVIS_AP_KEYS)
                    eval_results[f'{m}_mAP_copypaste'] = ' '.join(
                        f'{k}:0.0000' for k in LVIS_AP_KEYS)
                    continue
                summary = io.StringIO()
                with contextlib.redirect_stdout(summary):
                    lvis_dt = LVISResults(lvis_gt, result_files[m])
                    lvis_eval = LVISEval(lvis_gt, lvis_dt, m)
                    lvis_eval.run()
                    lvis_eval.print_results()
                print_log('\n' + summary.getvalue(), logger=logger)
                stats = lvis_eval.get_results()
                if classwise:
                    print_log('\n' + self._classwise_table(lvis_eval), logger=logger)
                for k, v in stats.items():
                    if k.startswith('AP'):
                        eval_results[f'{m}_{k}'] = float(f'{float(v):.4f}')
                eval_results[f'{m}_mAP_copypaste'] = ' '.join(
                    f'{k}:{float(v):.4f}' for k, v in stats.items() if k.startswith('AP'))
        finally:
            if tmp_dir is not None:
                tmp_dir.cleanup()
        return eval_results


@DATASETS.register_module()
class LVISV1Dataset(LVISV05Dataset):
    """LVIS v1 instances: images named by their ``coco_url``."""

    CLASSES = LVISV1_CLASSES

    def _adapt_json(self, data, ann_file):
        data = super()._adapt_json(data, ann_file)
        for img in data.get('images', []):
            if 'coco_url' in img:
                img['file_name'] = img['coco_url'].replace('http://images.cocodataset.org/', '')
        return data
