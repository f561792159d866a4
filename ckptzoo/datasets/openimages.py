"""Open Images (mmdet 2.x's ``OpenImagesDataset`` and ``OpenImagesChallengeDataset``).

``OpenImagesDataset`` reads the V6 CSVs as mmdet's ``openimages_detection.py`` names them:
``ann_file`` the box annotations (``ImageID,Source,LabelName,Confidence,XMin,XMax,YMin,YMax,
IsOccluded,IsTruncated,IsGroupOf,IsDepiction,IsInside``, coordinates normalised to [0, 1]; the
pipeline's ``LoadAnnotations(denorm_bbox=True)`` scales them to pixels), ``label_file`` the
class descriptions (``/m/011k07,Tortoise``: ``CLASSES`` are the names in its order),
``hierarchy_file`` the class hierarchy json, ``image_level_ann_file`` the human-verified image
labels, ``meta_file`` a pickle of ``dict(filename, ori_shape)`` per image (the image sizes the
evaluation scales the gt boxes with). Images are ``img_prefix/<ImageID>.jpg``.

``OpenImagesChallengeDataset`` reads the 2019 challenge's files: the ``.txt`` annotations
(per image: file name, size, box count, then ``label x1 y1 x2 y2 is_group_of`` lines, labels
from 1), ``label_file`` lines ``/m/..,name,id`` (``CLASSES`` by id), the hierarchy as a
``.np`` relation matrix, image labels ``ImageID,LabelName,Confidence``.

``evaluate`` is mmdet's hierarchy-aware mAP (``metric='mAP'``, keys ``AP50`` and ``mAP``): each
gt box also counts for every ancestor of its class (``get_supercategory``); a detection of a
class also counts for each ancestor the image is annotated with (boxes or image-level labels),
and with ``filter_labels`` the detections of classes the image is not annotated with are
dropped; group-of boxes are matched by intersection over the detection (``ioa_thr``):
:mod:`ckptzoo.evaluation.openimages_map`.

Fixes over mmdet 2.28.2, names kept: ``evaluate`` does not modify the caller's results (mmdet
rewrote them in place); an image whose box rows are not consecutive in the CSV is one image
(mmdet made one entry per run of rows); without a meta file the image sizes are read from the
image files (mmdet gathered them from the test pipeline's outputs, by a side effect of
``prepare_test_img`` that depended on every image being loaded once, in order, in this process).
"""
import copy
import csv
import json
import os.path as osp
import pickle
from collections import OrderedDict, defaultdict

import numpy as np
from mmengine.logging import print_log
from PIL import Image

from ..evaluation.openimages_map import eval_openimages_map
from ..registry import DATASETS
from .custom import CustomDataset


def _rows(path):
    with open(path, newline='', encoding='utf-8') as f:
        return [row for row in csv.reader(f) if row]


@DATASETS.register_module()
class OpenImagesDataset(CustomDataset):
    """mmdet 2.28's arguments and defaults (see the module docstring)."""

    METRICS = ('mAP', )

    def __init__(self, ann_file, label_file='', image_level_ann_file='', get_supercategory=True,
                 hierarchy_file=None, get_metas=True, load_from_file=True, meta_file='',
                 filter_labels=True, load_image_level_labels=True,
                 file_client_args=dict(backend='disk'), **kwargs):
        data_root = kwargs.get('data_root')

        def _rooted(path):
            return osp.join(data_root, path) if data_root and path and not osp.isabs(path) \
                else path
        self.label_file = _rooted(label_file)
        self.index_dict = {}
        self.cat2label = {}
        self._class_names = self.get_classes_from_csv(self.label_file)
        super().__init__(ann_file=ann_file, file_client_args=file_client_args, **kwargs)
        self.CLASSES = self._class_names
        self.image_level_ann_file = _rooted(image_level_ann_file)
        self.load_image_level_labels = load_image_level_labels
        self.get_supercategory = get_supercategory
        if get_supercategory:
            if hierarchy_file is None:
                raise ValueError(f'{type(self).__name__}: get_supercategory=True needs the '
                                 f'hierarchy_file')
            self.class_label_tree = self.get_relation_matrix(_rooted(hierarchy_file))
        self.get_metas = get_metas
        self.load_from_file = load_from_file
        self.meta_file = _rooted(meta_file)
        self.filter_labels = filter_labels

    # -- classes and annotations ------------------------------------------------------------
    def get_classes_from_csv(self, label_file):
        if not str(label_file).endswith('csv'):
            raise ValueError(f'label_file must be a .csv, got {label_file!r}')
        names = []
        for row in _rows(label_file):
            self.cat2label[row[0]] = row[1]
            self.index_dict[row[0]] = len(names)
            names.append(row[1])
        return names

    def _label(self, label_name, where):
        if label_name not in self.index_dict:
            raise ValueError(f'{where}: label {label_name!r} is not in the label file '
                             f'{self.label_file!r}')
        return self.index_dict[label_name]

    def load_annotations(self, ann_file):
        self.ann_infos = defaultdict(list)
        data_infos = []
        for i, row in enumerate(_rows(ann_file)):
            if i == 0:
                continue
            img_id = row[0]
            label = self._label(row[2], f'{ann_file!r} line {i + 1}')
            flags = [int(v) == 1 for v in row[8:13]]
            if img_id not in self.ann_infos:
                data_infos.append(dict(img_id=img_id, filename=f'{img_id}.jpg'))
            self.ann_infos[img_id].append(dict(
                bbox=[float(row[4]), float(row[6]), float(row[5]), float(row[7])], label=label,
                is_occluded=flags[0], is_truncated=flags[1], is_group_of=flags[2],
                is_depiction=flags[3], is_inside=flags[4]))
        return data_infos

    def get_ann_info(self, idx):
        objs = self.ann_infos[self.data_infos[idx]['img_id']]
        bboxes = np.array([o['bbox'] for o in objs], dtype=np.float32).reshape(-1, 4)
        ann = dict(bboxes=bboxes, labels=np.array([o['label'] for o in objs], dtype=np.int64),
                   bboxes_ignore=np.zeros((0, 4), dtype=np.float32),
                   labels_ignore=np.zeros((0, ), dtype=np.int64))
        for key, flag in (('gt_is_group_ofs', 'is_group_of'), ('is_occludeds', 'is_occluded'),
                          ('is_truncateds', 'is_truncated'), ('is_depictions', 'is_depiction'),
                          ('is_insides', 'is_inside')):
            ann[key] = np.array([o[flag] for o in objs], dtype=bool)
        return ann

    def get_cat_ids(self, idx):
        return self.get_ann_info(idx)['labels'].tolist()

    def _filter_imgs(self, min_size=32):
        """Every image is kept (mmdet's: the CSV lists only images with boxes)."""
        return list(range(len(self)))

    def _set_group_flag(self):
        self.flag = np.zeros(len(self), dtype=np.uint8)

    # -- the class hierarchy ----------------------------------------------------------------
    def get_relation_matrix(self, hierarchy_file):
        """``[C, C]``: row ``c`` is 1 at ``c`` and at each of its ancestors."""
        if not str(hierarchy_file).endswith('json'):
            raise ValueError(f'hierarchy_file must be a .json, got {hierarchy_file!r}')
        with open(hierarchy_file, encoding='utf-8') as f:
            hierarchy = json.load(f)
        tree = np.eye(len(self._class_names))
        self._mark_ancestors(hierarchy, tree, [])
        return tree

    def _mark_ancestors(self, node, tree, ancestors):
        for child in node.get('Subcategory', []):
            if 'LabelName' not in child:
                continue
            c = self._label(child['LabelName'], 'hierarchy_file')
            tree[c, ancestors] = 1
            self._mark_ancestors(child, tree, [c] + ancestors)

    def add_supercategory_ann(self, annotations):
        """Each gt box once more for every ancestor of its class."""
        out = []
        for ann in annotations:
            bboxes, labels, groups = [], [], []
            for bbox, label, group in zip(ann['bboxes'], ann['labels'],
                                          ann['gt_is_group_ofs']):
                for c in np.where(self.class_label_tree[label])[0]:
                    bboxes.append(bbox)
                    labels.append(c)
                    groups.append(group)
            out.append(dict(bboxes=np.array(bboxes, dtype=np.float32).reshape(-1, 4),
                            labels=np.array(labels, dtype=np.int64),
                            bboxes_ignore=ann['bboxes_ignore'],
                            gt_is_group_ofs=np.array(groups, dtype=bool)))
        return out

    def process_results(self, det_results, annotations, image_level_annotations):
        """Detections spread to the annotated ancestors and filtered to the annotated classes
        (mmdet's order of operations), on a copy."""
        det_results = copy.deepcopy(det_results)
        for i, dets in enumerate(det_results):
            original = copy.deepcopy(dets)
            allowed = annotations[i]['labels']
            if image_level_annotations is not None:
                allowed = np.append(allowed, image_level_annotations[i]['image_level_labels'])
            allowed = set(np.unique(allowed).tolist())
            for c in [k for k, d in enumerate(original) if d.shape[0]]:
                for parent in np.where(self.class_label_tree[c])[0]:
                    if parent in allowed and parent != c and self.get_supercategory:
                        dets[parent] = np.concatenate((dets[parent], original[c]))
                    elif parent not in allowed and self.filter_labels:
                        dets[parent] = np.empty((0, 5), dtype=np.float32)
        return det_results

    # -- image-level labels and sizes -------------------------------------------------------
    def load_image_label_from_csv(self, image_level_ann_file):
        items = defaultdict(list)
        for i, row in enumerate(_rows(image_level_ann_file)):
            if i:
                items[row[0]].append((self._label(row[2], image_level_ann_file),
                                      float(row[3])))
        return items

    def _img_key(self, idx):
        return self.data_infos[idx]['img_id']

    def get_image_level_ann(self, image_level_ann_file):
        items = self.load_image_label_from_csv(image_level_ann_file)
        out = []
        for i in range(len(self)):
            pairs = items.get(self._img_key(i), [])
            out.append(dict(image_level_labels=np.array([p[0] for p in pairs], dtype=np.int64),
                            confidences=np.array([p[1] for p in pairs], dtype=np.float32)))
        return out

    def _filename(self, idx):
        return self.data_infos[idx]['filename']

    def get_img_shapes(self):
        """``[(h, w)]`` per image: from ``meta_file`` (``get_metas`` and ``load_from_file``),
        else from the image files."""
        if self.get_metas and self.load_from_file:
            if not str(self.meta_file).endswith('pkl'):
                raise ValueError(f'meta_file must be a .pkl, got {self.meta_file!r}')
            with open(self.meta_file, 'rb') as f:
                metas = pickle.load(f)
            if len(metas) != len(self):
                raise ValueError(f'meta_file {self.meta_file!r} has {len(metas)} entries for '
                                 f'{len(self)} images')
            shapes = []
            for i, meta in enumerate(metas):
                if osp.basename(meta['filename']) != osp.basename(self._filename(i)):
                    raise ValueError(f'meta_file {self.meta_file!r} entry {i} is '
                                     f'{meta["filename"]!r}, the image is '
                                     f'{self._filename(i)!r}')
                shapes.append(tuple(meta['ori_shape'][:2]))
            return shapes
        shapes = []
        for i in range(len(self)):
            with Image.open(osp.join(self.img_prefix, self._filename(i))) as img:
                shapes.append((img.height, img.width))
        return shapes

    def denormalize_gt_bboxes(self, annotations):
        for ann, (h, w) in zip(annotations, self.get_img_shapes()):
            ann['bboxes'][:, 0::2] *= w
            ann['bboxes'][:, 1::2] *= h
        return annotations

    def evaluate(self, results, metric='mAP', logger=None, iou_thr=0.5, ioa_thr=0.5,
                 scale_ranges=None, denorm_gt_bbox=True, use_group_of=True):
        if not isinstance(metric, str):
            if len(metric) != 1:
                raise ValueError(f'evaluate takes one metric, got {metric!r}')
            metric = metric[0]
        if metric != 'mAP':
            raise KeyError(f"metric {metric!r} is not supported; supported: ['mAP']")
        if len(results) != len(self):
            raise ValueError(f'got results for {len(results)} images, the dataset has '
                             f'{len(self)}')
        annotations = [self.get_ann_info(i) for i in range(len(self))]
        image_level = (self.get_image_level_ann(self.image_level_ann_file)
                       if self.load_image_level_labels else None)
        if denorm_gt_bbox:
            annotations = self.denormalize_gt_bboxes(annotations)
        if self.get_supercategory:
            annotations = self.add_supercategory_ann(annotations)
        results = self.process_results(results, annotations, image_level)
        iou_thrs = [iou_thr] if isinstance(iou_thr, float) else list(iou_thr)
        ioa_thrs = [ioa_thr] if isinstance(ioa_thr, float) or ioa_thr is None \
            else list(ioa_thr)
        if len(iou_thrs) != len(ioa_thrs):
            raise ValueError(f'iou_thr and ioa_thr must be as many, got {iou_thrs} and '
                             f'{ioa_thrs}')
        eval_results = OrderedDict()
        mean_aps = []
        for iou, ioa in zip(iou_thrs, ioa_thrs):
            print_log(f'\n{"-" * 15}iou_thr, ioa_thr: {iou}, {ioa}{"-" * 15}', logger=logger)
            mean_ap, _ = eval_openimages_map(results, annotations, iou, ioa, self.CLASSES,
                                             logger, use_group_of, scale_ranges)
            mean_aps.append(mean_ap)
            eval_results[f'AP{int(iou * 100):02d}'] = round(mean_ap, 3)
        eval_results['mAP'] = sum(mean_aps) / len(mean_aps)
        return eval_results


@DATASETS.register_module()
class OpenImagesChallengeDataset(OpenImagesDataset):
    """The 2019 challenge's files (see the module docstring)."""

    def __init__(self, ann_file, **kwargs):
        if not str(ann_file).endswith('txt'):
            raise ValueError(f'OpenImagesChallengeDataset reads a .txt ann_file, got '
                             f'{ann_file!r}')
        super().__init__(ann_file=ann_file, **kwargs)

    def get_classes_from_csv(self, label_file):
        if not str(label_file).endswith('csv'):
            raise ValueError(f'label_file must be a .csv, got {label_file!r}')
        rows = _rows(label_file)
        for row in rows:
            self.index_dict[row[0]] = int(row[2]) - 1
            self.cat2label[row[0]] = row[1]
        return [row[1] for row in sorted(rows, key=lambda r: int(r[2]))]

    def load_annotations(self, ann_file):
        with open(ann_file, encoding='utf-8') as f:
            lines = f.readlines()
        infos, i = [], 0
        while i < len(lines):
            filename = lines[i].rstrip()
            n = int(lines[i + 2])
            boxes = [line.split() for line in lines[i + 3:i + 3 + n]]
            i += 3 + n
            infos.append(dict(img_info=dict(filename=filename), filename=filename,
                              ann_info=dict(
                                  bboxes=np.array([[float(v) for v in b[1:5]] for b in boxes],
                                                  dtype=np.float32).reshape(-1, 4),
                                  labels=np.array([int(b[0]) - 1 for b in boxes],
                                                  dtype=np.int64),
                                  bboxes_ignore=np.zeros((0, 4), dtype=np.float32),
                                  gt_is_group_ofs=np.array([int(b[5]) == 1 for b in boxes],
                                                           dtype=bool))))
        return infos

    def get_ann_info(self, idx):
        return copy.deepcopy(self.data_infos[idx]['ann_info'])

    def prepare_train_img(self, idx):
        info = self.data_infos[idx]
        results = dict(img_info=info['img_info'], ann_info=self.get_ann_info(idx))
        if self.proposals is not None:
            results['proposals'] = self.proposals[idx]
        self.pre_pipeline(results)
        return self.pipeline(results)

    def prepare_test_img(self, idx):
        results = dict(img_info=self.data_infos[idx]['img_info'])
        if self.proposals is not None:
            results['proposals'] = self.proposals[idx]
        self.pre_pipeline(results)
        return self.pipeline(results)

    def get_relation_matrix(self, hierarchy_file):
        if not str(hierarchy_file).endswith('np'):
            raise ValueError(f'hierarchy_file must be a .np file, got {hierarchy_file!r}')
        with open(hierarchy_file, 'rb') as f:
            return np.load(f, allow_pickle=True)[1:, 1:]

    def _img_key(self, idx):
        return osp.basename(self.data_infos[idx]['filename'])[:-4]

    def load_image_label_from_csv(self, image_level_ann_file):
        items = defaultdict(list)
        for i, row in enumerate(_rows(image_level_ann_file)):
            if i:
                items[row[0]].append((self._label(row[1], image_level_ann_file),
                                      float(row[2])))
        return items
