"""Pascal VOC-style XML annotations: ``XMLDataset`` and ``VOCDataset`` (mmdet 2.x).

Box convention, exactly as mmdet 2.x's ``XMLDataset``: each coordinate is read as
``int(float(text))`` (float coordinates are truncated) and then 1 is subtracted from all four
(xmin, ymin, xmax, ymax), turning VOC's 1-based pixel indices into 0-based ones. Evaluation uses
``use_legacy_coordinate=True`` (widths and heights +1, as the VOC devkit).

Difficult objects (``<difficult>1</difficult>``) go to ``bboxes_ignore``/``labels_ignore``:
they give no training target and, in ``evaluate``, a detection matching one is neither a true
nor a false positive. ``min_size`` (training only) treats smaller boxes the same way.
``<truncated>`` is read into ``truncated`` of the annotation (mmdet ignores it) and changes
nothing else. A missing ``<difficult>`` means 0; a missing ``<size>`` means the image is read
to get it. Objects of a class not in ``CLASSES`` are skipped.

Fix over mmdet 2.x (which trained on any box): the boxes of ``CLASSES`` objects are checked when
the dataset is built, and a box with ``xmax <= xmin`` or ``ymax <= ymin`` (zero or negative
area: it gives infinite regression targets) or outside the image is an error naming the XML
file, the object and the box. VOC's indices run from 1 to the width/height, so ``xmax ==
width`` (a box touching the border) is valid; one pixel beyond each edge (``xmin == 0``,
``xmax == width + 1``, as 0-based or end-exclusive exports write) is tolerated.
"""
import os.path as osp
import xml.etree.ElementTree as ET

import numpy as np
from PIL import Image

from ..registry import DATASETS
from .custom import CustomDataset, list_from_file


def _parse_xml(xml_path):
    try:
        return ET.parse(xml_path).getroot()
    except ET.ParseError as e:
        raise ValueError(f'malformed annotation XML {xml_path!r}: {e}') from e
    except OSError as e:
        raise FileNotFoundError(f'cannot read annotation XML {xml_path!r}: {e}') from e


def _text(elem, tag, xml_path):
    child = elem.find(tag)
    if child is None or child.text is None or not child.text.strip():
        raise ValueError(f'annotation XML {xml_path!r}: <{elem.tag}> has no <{tag}>')
    return child.text.strip()


def _number(elem, tag, xml_path, cast):
    text = _text(elem, tag, xml_path)
    try:
        return cast(float(text)) if cast is int else cast(text)
    except (ValueError, OverflowError):  # int(float('inf')) overflows
        raise ValueError(f'annotation XML {xml_path!r}: <{tag}> must be a number, '
                         f'got {text!r}') from None


_BOX_TAGS = ('xmin', 'ymin', 'xmax', 'ymax')


def check_boxes(root, xml_path, width, height, classes):
    """Raise a ValueError naming the file, the object and the box for a box of a ``classes``
    object that has no area or lies outside the ``width`` x ``height`` image (see the module
    docstring). Objects whose box cannot be read are left to ``get_ann_info``, which says why."""
    if width <= 0 or height <= 0:
        raise ValueError(f'annotation XML {xml_path!r}: <size> gives a {width}x{height} image; '
                         f'width and height must be positive (without <size> they are read '
                         f'from the image)')
    for index, obj in enumerate(root.findall('object')):
        name, bnd_box = obj.findtext('name', '').strip(), obj.find('bndbox')
        if name not in classes or bnd_box is None:
            continue
        try:
            box = [_number(bnd_box, tag, xml_path, int) for tag in _BOX_TAGS]
        except ValueError:
            continue
        xmin, ymin, xmax, ymax = box
        wrong = [text for bad, text in (
            (xmax <= xmin, 'xmax <= xmin'), (ymax <= ymin, 'ymax <= ymin'),
            (xmin < 0 or ymin < 0, 'a negative coordinate'),
            (xmax > width + 1, f'xmax beyond the width {width}'),
            (ymax > height + 1, f'ymax beyond the height {height}')) if bad]
        if wrong:
            raise ValueError(
                f'annotation XML {xml_path!r}: object {index} ({name!r}) has the box '
                f'(xmin, ymin, xmax, ymax) = {tuple(box)}: {", ".join(wrong)}. A VOC box is in '
                f'1-based pixels with 1 <= xmin < xmax <= width and 1 <= ymin < ymax <= height '
                f'(one pixel beyond each edge is accepted: 0 .. {width + 1} x 0 .. {height + 1})')


@DATASETS.register_module()
class XMLDataset(CustomDataset):
    """VOC-layout dataset: ``ann_file`` lists image ids; ``img_prefix/JPEGImages/<id>.jpg`` and
    ``img_prefix/Annotations/<id>.xml``. Needs ``CLASSES`` or ``classes``."""

    use_legacy_coordinate = True

    def __init__(self, min_size=None, img_subdir='JPEGImages', ann_subdir='Annotations',
                 **kwargs):
        if not (self.CLASSES or kwargs.get('classes')):
            raise ValueError(f'{type(self).__name__} needs class names: set CLASSES on the '
                             f'class or pass classes=')
        self.img_subdir = img_subdir
        self.ann_subdir = ann_subdir
        self.min_size = min_size
        super().__init__(**kwargs)
        self.cat2label = {cat: i for i, cat in enumerate(self.CLASSES)}

    def check_mask_annotations(self):
        """VOC XML has boxes only: a pipeline loading instance masks is an error."""
        raise ValueError(f'{type(self).__name__} {self.ann_file!r}: VOC XML annotations have no '
                         f'instance masks, but the pipeline has '
                         f'LoadAnnotations(with_mask=True); use with_mask=False or a dataset '
                         f'with masks (CocoDataset)')

    def _xml_path(self, img_id):
        return osp.join(self.img_prefix, self.ann_subdir, f'{img_id}.xml')

    def _img_filename(self, img_id, root, xml_path):
        """The image's path under ``img_prefix`` (``img_subdir/<id>.jpg``; WIDER Face reads
        the XML's ``<folder>``)."""
        return osp.join(self.img_subdir, f'{img_id}.jpg')

    def load_annotations(self, ann_file):
        data_infos = []
        for img_id in list_from_file(ann_file):
            img_id = img_id.strip()
            xml_path = self._xml_path(img_id)
            root = _parse_xml(xml_path)
            filename = self._img_filename(img_id, root, xml_path)
            size = root.find('size')
            if size is not None and size.find('width') is not None \
                    and size.find('height') is not None:
                width = _number(size, 'width', xml_path, int)
                height = _number(size, 'height', xml_path, int)
            else:
                with Image.open(osp.join(self.img_prefix, filename)) as img:
                    width, height = img.size
            check_boxes(root, xml_path, width, height, self.CLASSES)
            data_infos.append(dict(id=img_id, filename=filename, width=width, height=height))
        return data_infos

    def _filter_imgs(self, min_size=32):
        """Drop images with a short side < ``min_size`` and, with ``filter_empty_gt``, images
        with no object of a known class (difficult ones count, as in mmdet 2.x)."""
        valid = []
        for i, info in enumerate(self.data_infos):
            if min(info['width'], info['height']) < min_size:
                continue
            if self.filter_empty_gt:
                root = _parse_xml(self._xml_path(info['id']))
                if not any(_text(obj, 'name', self._xml_path(info['id'])) in self.CLASSES
                           for obj in root.findall('object')):
                    continue
            valid.append(i)
        return valid

    def get_ann_info(self, idx):
        img_id = self.data_infos[idx]['id']
        xml_path = self._xml_path(img_id)
        root = _parse_xml(xml_path)
        bboxes, labels, bboxes_ignore, labels_ignore, truncated = [], [], [], [], []
        for obj in root.findall('object'):
            name = _text(obj, 'name', xml_path)
            if name not in self.CLASSES:
                continue
            label = self.cat2label[name]
            difficult = obj.find('difficult')
            difficult = 0 if difficult is None or not (difficult.text or '').strip() \
                else _number(obj, 'difficult', xml_path, int)
            bnd_box = obj.find('bndbox')
            if bnd_box is None:
                raise ValueError(f'annotation XML {xml_path!r}: <object> {name!r} has no '
                                 f'<bndbox>')
            bbox = [_number(bnd_box, tag, xml_path, int)
                    for tag in ('xmin', 'ymin', 'xmax', 'ymax')]
            ignore = False
            if self.min_size:
                if self.test_mode:
                    raise ValueError('min_size is a training option; got it with test_mode')
                if bbox[2] - bbox[0] < self.min_size or bbox[3] - bbox[1] < self.min_size:
                    ignore = True
            if difficult or ignore:
                bboxes_ignore.append(bbox)
                labels_ignore.append(label)
            else:
                bboxes.append(bbox)
                labels.append(label)
                trunc = obj.find('truncated')
                truncated.append(0 if trunc is None or not (trunc.text or '').strip()
                                 else _number(obj, 'truncated', xml_path, int))
        ann = dict(
            bboxes=np.array(bboxes, dtype=np.float32).reshape(-1, 4) - 1,
            labels=np.array(labels, dtype=np.int64),
            bboxes_ignore=np.array(bboxes_ignore, dtype=np.float32).reshape(-1, 4) - 1,
            labels_ignore=np.array(labels_ignore, dtype=np.int64),
            truncated=np.array(truncated, dtype=np.int64))
        return ann

    def get_cat_ids(self, idx):
        return self.get_ann_info(idx)['labels'].tolist()


@DATASETS.register_module()
class VOCDataset(XMLDataset):
    """Pascal VOC. ``year`` is 2007 or 2012 from ``img_prefix`` (it must contain VOC2007 or
    VOC2012); ``evaluate`` uses 11-point AP for 2007 and area AP for 2012, as the devkits."""

    CLASSES = ('aeroplane', 'bicycle', 'bird', 'boat', 'bottle', 'bus', 'car', 'cat', 'chair',
               'cow', 'diningtable', 'dog', 'horse', 'motorbike', 'person', 'pottedplant',
               'sheep', 'sofa', 'train', 'tvmonitor')

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        if 'VOC2007' in self.img_prefix:
            self.year = 2007
        elif 'VOC2012' in self.img_prefix:
            self.year = 2012
        else:
            raise ValueError(f'cannot infer the VOC year: img_prefix {self.img_prefix!r} '
                             f'contains neither VOC2007 nor VOC2012')

    def _eval_mode(self):
        return '11points' if self.year == 2007 else 'area'

    def evaluate(self, results, metric='mAP', logger=None, proposal_nums=(100, 300, 1000),
                 iou_thr=0.5, scale_ranges=None):
        """``OrderedDict(mAP=..., AP50=...)``; 11-point AP for VOC2007, area AP otherwise.
        ``scale_ranges`` is ignored, as in mmdet 2.x."""
        return self._evaluate(results, [self.get_ann_info(i) for i in range(len(self))],
                              metric, logger, proposal_nums, iou_thr, None)
