"""COCO panoptic data: ``CocoPanopticDataset`` (mmdet 2.x's arguments, labels, result format
and metric keys) on ``COCOPanoptic`` (the panoptic json indexed as mmdet's wrapper does), with
PQ from :mod:`ckptzoo.evaluation.panoptic_quality` (panopticapi's computation, not on PyPI).

Labels: the things first (``0 .. num_things - 1``), then the stuff, in the order of
``CLASSES`` (``THING_CLASSES + STUFF_CLASSES``); a panoptic result is an ``(H, W)`` int map of
``label + instance_id * INSTANCE_OFFSET``, the label ``len(CLASSES)`` VOID.

Fixes over mmdet 2.28.2, names kept:

- labels follow ``CLASSES`` by name (mmdet followed the json's category order and could not
  take ``classes``); a json category in neither ``THING_CLASSES`` nor ``STUFF_CLASSES``, or on
  the wrong side of the split (its ``isthing``), is an error naming it. With ``classes`` given,
  the split is read from the json's ``isthing`` (the things must come first), so the instance
  evaluation (``bbox`` / ``segm``) finds its categories (mmdet kept COCO's 80 thing names and
  evaluated nothing: -1);
- ``CLASSES`` is ``THING_CLASSES + STUFF_CLASSES`` (mmdet's list has ``' truck'``);
- a PNG is paired with its image by ``image_id`` (mmdet zipped the json's ``images`` with its
  ``annotations``, assuming one order) and its name is the annotation's ``file_name`` (mmdet
  replaced every ``jpg`` in the image's name);
- a missing PNG is an error naming it when the dataset is built; a PNG whose segment ids do not
  match its ``segments_info`` is an error naming the file when it is loaded;
- ``ins_ann_file`` is joined with ``data_root`` as documented (mmdet did not);
- ``evaluate`` does not overwrite the results' VOID pixels; an image with no segment is
  evaluated (its predictions are false positives; mmdet skipped it); a split with no counted
  category gives 0 (panopticapi divides by zero).
"""
import json
import os
import os.path as osp
import tempfile
from collections import defaultdict

import cv2
import numpy as np
from mmengine.fileio import dump
from mmengine.logging import print_log

from ..evaluation.panoptic_quality import (INSTANCE_OFFSET, VOID, id2rgb, parse_pq_results,
                                           pq_compute)
from ..registry import DATASETS
from .coco import COCO, CocoDataset

__all__ = ['COCOPanoptic', 'CocoPanopticDataset']

STUFF_CLASSES = (
    'banner', 'blanket', 'bridge', 'cardboard', 'counter', 'curtain', 'door-stuff', 'floor-wood',
    'flower', 'fruit', 'gravel', 'house', 'light', 'mirror-stuff', 'net', 'pillow', 'platform',
    'playingfield', 'railroad', 'river', 'road', 'roof', 'sand', 'sea', 'shelf', 'snow',
    'stairs', 'tent', 'towel', 'wall-brick', 'wall-stone', 'wall-tile', 'wall-wood',
    'water-other', 'window-blind', 'window-other', 'tree-merged', 'fence-merged',
    'ceiling-merged', 'sky-other-merged', 'cabinet-merged', 'table-merged',
    'floor-other-merged', 'pavement-merged', 'mountain-merged', 'grass-merged', 'dirt-merged',
    'paper-merged', 'food-other-merged', 'building-other-merged', 'rock-merged',
    'wall-other-merged', 'rug-merged')


class COCOPanoptic(COCO):
    """The panoptic json indexed as mmdet's ``COCOPanoptic``: ``anns`` maps a segment id to the
    list of its segments (ids repeat across images), ``imgToAnns`` an image id to its segments
    (each given ``image_id``, ``height``, ``width``), ``imgs[id]['segm_file']`` its PNG."""

    def createIndex(self):
        anns, cats, imgs = defaultdict(list), {}, {}
        img_to_anns, cat_to_imgs = defaultdict(list), defaultdict(list)
        for img in self.dataset.get('images', []):
            imgs[img['id']] = img
        for cat in self.dataset.get('categories', []):
            cats[cat['id']] = cat
        for ann in self.dataset.get('annotations', []):
            img = imgs[ann['image_id']]
            img['segm_file'] = ann['file_name']
            for seg in ann['segments_info']:
                seg['image_id'] = ann['image_id']
                seg['height'] = img['height']
                seg['width'] = img['width']
                img_to_anns[ann['image_id']].append(seg)
                anns[seg['id']].append(seg)
                cat_to_imgs[seg['category_id']].append(ann['image_id'])
        self.anns = dict(anns)
        self.imgToAnns = img_to_anns
        self.catToImgs = cat_to_imgs
        self.imgs = imgs
        self.cats = cats

    def load_anns(self, ids=[]):
        """The segments of the segment ids ``ids`` (each id's list, concatenated)."""
        if isinstance(ids, int):
            return self.anns[ids]
        return [seg for i in ids for seg in self.anns[i]]


def _check_json(data, ann_file):
    where = f'COCO panoptic json {ann_file!r}'
    if not isinstance(data, dict):
        raise ValueError(f'{where} must hold an object, got {type(data).__name__}')
    for key in ('images', 'categories'):
        if key not in data:
            raise ValueError(f'{where} has no {key!r} (keys: {sorted(data)})')
    img_ids = {img['id'] for img in data['images']}
    for i, cat in enumerate(data['categories']):
        missing = [k for k in ('id', 'name', 'isthing') if k not in cat]
        if missing:
            raise ValueError(f'{where}: categories[{i}] has no {missing} (a panoptic category '
                             f'has id, name and isthing)')
    cat_ids = {c['id'] for c in data['categories']}
    seen = set()
    for i, ann in enumerate(data.get('annotations', [])):
        missing = [k for k in ('image_id', 'file_name', 'segments_info') if k not in ann]
        if missing:
            raise ValueError(f'{where}: annotations[{i}] has no {missing}')
        if ann['image_id'] not in img_ids:
            raise ValueError(f'{where}: annotations[{i}] ({ann["file_name"]!r}) has image_id '
                             f'{ann["image_id"]!r}, which is not the id of an image')
        if ann['image_id'] in seen:
            raise ValueError(f'{where}: image {ann["image_id"]!r} has two annotations')
        seen.add(ann['image_id'])
        ids = set()
        for seg in ann['segments_info']:
            for key in ('id', 'category_id', 'bbox', 'area'):
                if key not in seg:
                    raise ValueError(f'{where}: a segment of {ann["file_name"]!r} has no '
                                     f'{key!r}')
            if seg['category_id'] not in cat_ids:
                raise ValueError(f'{where}: segment {seg["id"]} of {ann["file_name"]!r} has '
                                 f'unknown category_id {seg["category_id"]!r}')
            if seg['id'] in ids:
                raise ValueError(f'{where}: {ann["file_name"]!r} repeats segment id '
                                 f'{seg["id"]}')
            ids.add(seg['id'])


@DATASETS.register_module()
class CocoPanopticDataset(CocoDataset):
    """COCO panoptic segmentation (mmdet 2.x). ``ann_file`` is a panoptic json, ``seg_prefix``
    the folder of its PNGs, ``ins_ann_file`` the instances json for ``bbox`` / ``segm``
    evaluation of instance results. Training keeps the images with a thing segment (crowd
    ones included) when ``filter_empty_gt``, and a short side of 32 px at least."""

    METRICS = ('PQ', 'pq', 'bbox', 'segm', 'proposal')
    THING_CLASSES = CocoDataset.CLASSES
    STUFF_CLASSES = STUFF_CLASSES
    CLASSES = THING_CLASSES + STUFF_CLASSES

    def __init__(self, ann_file, pipeline, ins_ann_file=None, classes=None, data_root=None,
                 img_prefix='', seg_prefix=None, proposal_file=None, test_mode=False,
                 filter_empty_gt=True, file_client_args=dict(backend='disk')):
        self._custom_classes = classes is not None
        if ins_ann_file is not None and data_root is not None and not osp.isabs(ins_ann_file):
            ins_ann_file = osp.join(data_root, ins_ann_file)
        self.ins_ann_file = ins_ann_file
        self._maps_checked = False
        super().__init__(ann_file, pipeline, classes=classes, data_root=data_root,
                         img_prefix=img_prefix, seg_prefix=seg_prefix,
                         proposal_file=proposal_file, test_mode=test_mode,
                         filter_empty_gt=filter_empty_gt, file_client_args=file_client_args)

    # ---------------------------------------------------------------- annotations
    def load_annotations(self, ann_file):
        try:
            with open(ann_file, encoding='utf-8') as f:
                data = json.load(f)
        except json.JSONDecodeError as e:
            raise ValueError(f'COCO panoptic json {ann_file!r} is not valid json: {e}') from e
        _check_json(data, ann_file)
        self.coco = COCOPanoptic(dataset=data)
        self.categories = self.coco.cats
        self._set_labels(ann_file)
        self.img_ids = self.coco.get_img_ids()
        data_infos = []
        for img_id in self.img_ids:
            info = dict(self.coco.load_imgs([img_id])[0])
            info['filename'] = info['file_name']
            info.setdefault('segm_file', osp.splitext(info['file_name'])[0] + '.png')
            data_infos.append(info)
        return data_infos

    def _set_labels(self, ann_file):
        """``cat2label`` by name in ``CLASSES`` (things first), checked against the json."""
        where = f'COCO panoptic json {ann_file!r}'
        classes = list(self.CLASSES)
        by_name = {}
        for cat in self.categories.values():
            if cat['name'] in by_name:
                raise ValueError(f'{where}: two categories are named {cat["name"]!r}')
            by_name[cat['name']] = cat
        if self._custom_classes:
            self.THING_CLASSES = tuple(c for c in classes
                                       if c in by_name and by_name[c]['isthing'])
            self.STUFF_CLASSES = tuple(c for c in classes if c not in self.THING_CLASSES)
        things, stuff = set(self.THING_CLASSES), set(self.STUFF_CLASSES)
        for name, cat in by_name.items():
            side = 'THING_CLASSES' if cat['isthing'] else 'STUFF_CLASSES'
            if name not in things | stuff:
                raise ValueError(f'{where}: category {name!r} (id {cat["id"]}, isthing='
                                 f'{cat["isthing"]}) is in neither THING_CLASSES nor '
                                 f'STUFF_CLASSES of {type(self).__name__}; add it to '
                                 f'`classes` (things first) or remove its segments')
            if (name in things) != bool(cat['isthing']):
                raise ValueError(f'{where}: category {name!r} (id {cat["id"]}) has isthing='
                                 f'{cat["isthing"]} but is listed in '
                                 f'{"STUFF_CLASSES" if name in stuff else "THING_CLASSES"}; '
                                 f'it belongs in {side}')
        num_things = len(self.THING_CLASSES)
        if list(classes[:num_things]) != list(self.THING_CLASSES) or \
                set(classes[num_things:]) != stuff:
            raise ValueError(f'{type(self).__name__}: the classes must list the things '
                             f'{list(self.THING_CLASSES)} first, then the stuff; got {classes}')
        self.cat2label = {by_name[c]['id']: i for i, c in enumerate(classes) if c in by_name}
        self.label2cat = {v: k for k, v in self.cat2label.items()}
        self.cat_ids = [self.label2cat[i] for i in sorted(self.label2cat)]

    def get_ann_info(self, idx):
        img_id = self.data_infos[idx]['id']
        return self._parse_ann_info(self.data_infos[idx], self.coco.imgToAnns.get(img_id, []))

    def get_cat_ids(self, idx):
        """The labels of the image's segments."""
        img_id = self.data_infos[idx]['id']
        return [self.cat2label[s['category_id']] for s in self.coco.imgToAnns.get(img_id, [])]

    def _parse_ann_info(self, img_info, ann_info):
        """mmdet's: the non-crowd things' boxes and labels, the crowd things' boxes as
        ``bboxes_ignore``, ``masks`` one ``{'id', 'category', 'is_thing'}`` per kept segment
        (a crowd's ``is_thing`` False: no instance mask), ``seg_map`` the PNG; segments with
        no area or a box under 1 px are left out. ``segment_ids`` (ours) lists every segment
        id of the json, for the PNG check of ``LoadPanopticAnnotations``."""
        bboxes, labels, bboxes_ignore, mask_infos = [], [], [], []
        for ann in ann_info:
            x1, y1, w, h = ann['bbox']
            if ann['area'] <= 0 or w < 1 or h < 1:
                continue
            bbox = [x1, y1, x1 + w, y1 + h]
            label = self.cat2label[ann['category_id']]
            is_thing = bool(self.categories[ann['category_id']]['isthing'])
            if is_thing:
                if ann.get('iscrowd', False):
                    bboxes_ignore.append(bbox)
                    is_thing = False
                else:
                    bboxes.append(bbox)
                    labels.append(label)
            mask_infos.append(dict(id=ann['id'], category=label, is_thing=is_thing))
        return dict(bboxes=np.array(bboxes, dtype=np.float32).reshape(-1, 4),
                    labels=np.array(labels, dtype=np.int64),
                    bboxes_ignore=np.array(bboxes_ignore, dtype=np.float32).reshape(-1, 4),
                    masks=mask_infos, seg_map=img_info['segm_file'],
                    segment_ids=[a['id'] for a in ann_info])

    def _filter_imgs(self, min_size=32):
        with_things = {s['image_id'] for segs in self.coco.anns.values() for s in segs
                       if self.categories[s['category_id']]['isthing']}
        valid_inds, valid_ids = [], []
        for i, info in enumerate(self.data_infos):
            img_id = self.img_ids[i]
            if self.filter_empty_gt and img_id not in with_things:
                continue
            if min(info['width'], info['height']) >= min_size:
                valid_inds.append(i)
                valid_ids.append(img_id)
        self.img_ids = valid_ids
        return valid_inds

    def _no_objects_message(self):
        for i in range(len(self.data_infos)):
            if len(self.get_ann_info(i)['bboxes']):
                return None
        return (f'{type(self).__name__}: no training image of {self.ann_file!r} has a '
                f'non-crowd thing segment to train on, so every box and mask loss would be 0')

    def _check_panoptic_maps(self):
        """Every image's PNG exists under ``seg_prefix`` (an error naming the missing ones)."""
        if self._maps_checked:
            return
        where = f'{type(self).__name__} {self.ann_file!r}'
        if self.seg_prefix is None:
            raise ValueError(f"{where}: LoadPanopticAnnotations needs seg_prefix (the panoptic "
                             f"PNGs' folder, e.g. data/coco/annotations/panoptic_train2017/)")
        missing = [osp.join(self.seg_prefix, info['segm_file']) for info in self.data_infos
                   if not osp.isfile(osp.join(self.seg_prefix, info['segm_file']))]
        if missing:
            raise FileNotFoundError(f'{where}: {len(missing)} of {len(self.data_infos)} '
                                    f'panoptic PNGs are missing, e.g. {missing[:3]}')
        self._maps_checked = True

    check_mask_annotations = _check_panoptic_maps
    check_semantic_maps = _check_panoptic_maps

    # ---------------------------------------------------------------- results
    def _pan2json(self, results, outfile_prefix):
        """Write each result's PNG (``dirname(prefix)/panoptic/<segm_file>``, VOID pixels 0)
        and return the prediction json."""
        outdir = osp.join(osp.dirname(outfile_prefix), 'panoptic')
        os.makedirs(outdir, exist_ok=True)
        num_classes = len(self.CLASSES)
        annotations = []
        for idx, pan in enumerate(results):
            pan = np.asarray(pan)
            if pan.ndim != 2:
                raise ValueError(f'image {idx}: a panoptic result is an (H, W) map, got shape '
                                 f'{pan.shape}')
            pan = pan.astype(np.int64)  # a copy: the results stay as they were
            segments = []
            for pan_id in np.unique(pan).tolist():
                label = pan_id % INSTANCE_OFFSET
                if label == num_classes or label not in self.label2cat:  # VOID / no category
                    pan[pan == pan_id] = VOID
                    continue
                if label > num_classes:
                    raise ValueError(f'image {idx}: panoptic id {pan_id} has label {label}, '
                                     f'beyond the {num_classes} classes')
                cat_id = self.label2cat[label]
                segments.append(dict(id=int(pan_id), category_id=cat_id,
                                     isthing=self.categories[cat_id]['isthing'],
                                     area=int((pan == pan_id).sum())))
            if pan.max(initial=0) >= 256 ** 3:
                raise ValueError(f'image {idx}: panoptic ids must be below 256**3 to be '
                                 f'written as a PNG, got {pan.max()}')
            segm_file = self.data_infos[idx]['segm_file']
            ok, buf = cv2.imencode('.png', id2rgb(pan)[:, :, ::-1])
            if not ok:
                raise OSError(f'PNG encoding failed for {segm_file}')
            buf.tofile(osp.join(outdir, segm_file))
            annotations.append(dict(image_id=self.img_ids[idx], segments_info=segments,
                                    file_name=segm_file))
        return dict(annotations=annotations)

    def results2json(self, results, outfile_prefix):
        """Panoptic results (per image ``{'pan_results': (H, W) map, 'ins_results':
        (bbox, segm) optional}``) give ``<prefix>.panoptic.json`` and the PNGs, plus
        ``<prefix>.bbox.json`` / ``.segm.json`` of ``ins_results``; other results are
        written as ``CocoDataset`` does."""
        if not isinstance(results[0], dict):
            return super().results2json(results, outfile_prefix)
        files = {}
        if 'pan_results' in results[0]:
            files['panoptic'] = f'{outfile_prefix}.panoptic.json'
            dump(self._pan2json([r['pan_results'] for r in results], outfile_prefix),
                 files['panoptic'])
        if 'ins_results' in results[0]:
            bbox_json, segm_json = self._segm2json([r['ins_results'] for r in results])
            files['bbox'] = files['proposal'] = f'{outfile_prefix}.bbox.json'
            files['segm'] = f'{outfile_prefix}.segm.json'
            dump(bbox_json, files['bbox'])
            dump(segm_json, files['segm'])
        return files

    def evaluate_pan_json(self, result_files, outfile_prefix, logger=None, classwise=False,
                          nproc=32):
        """PQ of ``result_files['panoptic']`` against the ground truth of the evaluated
        images: mmdet's keys ``PQ SQ RQ PQ_th ... RQ_st`` (percent) and ``PQ_copypaste``."""
        with open(result_files['panoptic'], encoding='utf-8') as f:
            preds = {a['image_id']: a for a in json.load(f)['annotations']}
        matched = []
        for img_id, info in zip(self.img_ids, self.data_infos):
            if img_id not in preds:
                raise KeyError(f'no prediction for the image with id {img_id}')
            gt = dict(image_id=img_id, segments_info=self.coco.imgToAnns.get(img_id, []),
                      file_name=info['segm_file'])
            matched.append((gt, preds[img_id]))
        pq_stat = pq_compute(matched, self.seg_prefix,
                             osp.join(osp.dirname(outfile_prefix), 'panoptic'),
                             self.categories, nproc=nproc)
        pq_results = {}
        for name, isthing in (('All', None), ('Things', True), ('Stuff', False)):
            pq_results[name], per_class = pq_stat.pq_average(self.categories, isthing=isthing)
            if name == 'All':
                pq_results['classwise'] = per_class
        classwise_results = None
        if classwise:
            classwise_results = {self.categories[c]['name']: pq_results['classwise'][c]
                                 for c in self.cat_ids}
        _print_panoptic_table(pq_results, classwise_results, logger=logger)
        results = parse_pq_results(pq_results)
        results['PQ_copypaste'] = ' '.join(
            f'{results[k]:.3f}' for k in ('PQ', 'SQ', 'RQ', 'PQ_th', 'SQ_th', 'RQ_th', 'PQ_st',
                                         'SQ_st', 'RQ_st'))
        return results

    def evaluate(self, results, metric='PQ', logger=None, jsonfile_prefix=None,
                 classwise=False, nproc=32, **kwargs):
        """``'PQ'`` (or ``'pq'``, as mmdet) on ``pan_results``; ``'bbox'``, ``'segm'``,
        ``'proposal'`` on ``ins_results`` against ``ins_ann_file`` (``CocoDataset.evaluate``
        with the thing classes). ``kwargs`` go to the instance evaluation."""
        metrics = metric if isinstance(metric, list) else [metric]
        metrics = ['PQ' if m == 'pq' else m for m in metrics]
        allowed = ['PQ', 'bbox', 'segm', 'proposal']
        for m in metrics:
            if m not in allowed:
                raise KeyError(f'metric {m!r} is not supported by {type(self).__name__}; '
                               f'supported: {allowed} (and "pq")')
        if not isinstance(results, list) or not results or not isinstance(results[0], dict):
            raise TypeError('CocoPanopticDataset.evaluate takes a list of per-image dicts '
                            "{'pan_results': ..., 'ins_results': ...} (a panoptic model's "
                            'results)')
        if len(results) != len(self):
            raise ValueError(f'got results for {len(results)} images, the dataset has '
                             f'{len(self)}')
        ins_metrics = [m for m in metrics if m != 'PQ']
        if 'PQ' in metrics and 'pan_results' not in results[0]:
            raise KeyError("metric 'PQ' needs 'pan_results' in the results")
        if ins_metrics:
            if 'ins_results' not in results[0]:
                raise KeyError(f'metrics {ins_metrics} need instance results (ins_results), '
                               f'which the results do not hold')
            if self.ins_ann_file is None:
                raise ValueError(f'metrics {ins_metrics} need ins_ann_file (the instances '
                                 f'json) in the dataset config')
        eval_results = {}
        with tempfile.TemporaryDirectory() as tmp:
            prefix = jsonfile_prefix or osp.join(tmp, 'results')
            if 'PQ' in metrics:
                files = self.results2json([dict(pan_results=r['pan_results'])
                                           for r in results], prefix)
                eval_results.update(self.evaluate_pan_json(files, prefix, logger, classwise,
                                                           nproc=nproc))
        if ins_metrics:
            eval_results.update(self._evaluate_instances(
                [r['ins_results'] for r in results], ins_metrics, logger, jsonfile_prefix,
                classwise, **kwargs))
        return eval_results

    def _evaluate_instances(self, ins_results, metrics, logger, jsonfile_prefix, classwise,
                            **kwargs):
        saved = self.coco, self.cat_ids, self.label2cat
        coco = COCO(self.ins_ann_file)
        by_name = {c['name']: c['id'] for c in coco.dataset['categories']}
        label2cat = {i: by_name[n] for i, n in enumerate(self.THING_CLASSES) if n in by_name}
        try:
            self.coco = coco
            self.label2cat = label2cat
            self.cat_ids = [label2cat[i] for i in sorted(label2cat)]
            return CocoDataset.evaluate(self, ins_results, metric=metrics, logger=logger,
                                        jsonfile_prefix=jsonfile_prefix, classwise=classwise,
                                        **kwargs)
        finally:
            self.coco, self.cat_ids, self.label2cat = saved


def _print_panoptic_table(pq_results, classwise_results=None, logger=None):
    from terminaltables import AsciiTable
    rows = [['', 'PQ', 'SQ', 'RQ', 'categories']]
    for name in ('All', 'Things', 'Stuff'):
        r = pq_results[name]
        rows.append([name] + [f'{r[k] * 100:0.3f}' for k in ('pq', 'sq', 'rq')] + [r['n']])
    print_log('Panoptic Evaluation Results:\n' + AsciiTable(rows).table, logger=logger)
    if classwise_results:
        rows = [['category', 'PQ', 'SQ', 'RQ']]
        rows += [[name] + [f'{m[k] * 100:0.3f}' for k in ('pq', 'sq', 'rq')]
                 for name, m in classwise_results.items()]
        print_log('Classwise Panoptic Evaluation Results:\n' + AsciiTable(rows).table,
                  logger=logger)
