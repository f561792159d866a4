"""Objects365 v1 and v2 (mmdet 2.x's ``Objects365V1Dataset`` / ``Objects365V2Dataset``):
COCO-format jsons of 365 classes.

v1's json lists its categories in no particular order (train and val differ); mmdet sorts them
by id so labels do not depend on that order. Here labels follow ``CLASSES`` whatever the json's
order (``CocoDataset``), which for v1 (names listed in id order) gives the same labels.

v2's ``file_name`` is ``images/v1/patch8/objects365_v1_00420917.jpg``; as mmdet, the image is
read from ``img_prefix/patch8/objects365_v1_00420917.jpg`` (last folder and name), and the three
images the release lists but does not ship are left out. Fix over mmdet 2.28.2, which left them
out of ``data_infos`` but not of ``img_ids`` (so the filtering and the evaluation paired images
with the wrong ids after the first one): they are dropped from the json with their annotations.
"""
import os.path as osp

from ..registry import DATASETS
from .coco import CocoDataset
from .objects365_classes import OBJECTS365V1_CLASSES, OBJECTS365V2_CLASSES

#: images in v2's annotations that the release does not ship (mmdet's ``objv2_ignore_list``)
OBJV2_MISSING = (osp.join('patch16', 'objects365_v2_00908726.jpg'),
                 osp.join('patch6', 'objects365_v1_00320532.jpg'),
                 osp.join('patch6', 'objects365_v1_00320534.jpg'))


@DATASETS.register_module()
class Objects365V1Dataset(CocoDataset):
    """Objects365 v1 detection."""

    CLASSES = OBJECTS365V1_CLASSES
    PALETTE = None

    def _adapt_json(self, data, ann_file):
        data['categories'] = sorted(data.get('categories', []), key=lambda c: c['id'])
        return data


@DATASETS.register_module()
class Objects365V2Dataset(CocoDataset):
    """Objects365 v2 detection."""

    CLASSES = OBJECTS365V2_CLASSES
    PALETTE = None

    def _adapt_json(self, data, ann_file):
        kept, dropped = [], set()
        for img in data.get('images', []):
            folder, name = osp.split(img['file_name'])
            img = dict(img, file_name=osp.join(osp.basename(folder), name))
            if img['file_name'] in OBJV2_MISSING:
                dropped.add(img['id'])
            else:
                kept.append(img)
        data['images'] = kept
        if dropped:
            data['annotations'] = [a for a in data.get('annotations', [])
                                   if a.get('image_id') not in dropped]
        return data
