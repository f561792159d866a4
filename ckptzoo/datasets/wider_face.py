"""WIDER Face in Pascal VOC XML (mmdet 2.x's ``WIDERFaceDataset``).

Layout, as the converted annotations mmdet's ``wider_face.py`` config reads::

    data/WIDERFace/train.txt                       image ids, one a line
    data/WIDERFace/WIDER_train/Annotations/<id>.xml   (folder, size, objects named 'face')
    data/WIDERFace/WIDER_train/<folder>/<id>.jpg      <folder> from the XML, e.g. 0--Parade

Boxes are read as ``XMLDataset`` reads them (1-based pixels, minus 1). ``evaluate`` is
``CustomDataset``'s box mAP with mmdet's defaults for a dataset that is not VOC: area AP and
box widths without the legacy +1 (mmdet's ``CustomDataset.evaluate``).
"""
import os.path as osp

from ..registry import DATASETS
from .voc import XMLDataset, _text


@DATASETS.register_module()
class WIDERFaceDataset(XMLDataset):
    """WIDER Face: one class, ``face``; the image is ``img_prefix/<folder>/<id>.jpg`` with
    ``<folder>`` the XML's."""

    CLASSES = ('face', )
    PALETTE = [(0, 255, 0)]
    use_legacy_coordinate = False

    def _img_filename(self, img_id, root, xml_path):
        return osp.join(_text(root, 'folder', xml_path), f'{img_id}.jpg')
