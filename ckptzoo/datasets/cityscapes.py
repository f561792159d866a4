"""Cityscapes instances in COCO format (mmdet 2.x's ``CityscapesDataset``), as mmdet's
``cityscapes_instance.py`` reads them (``instancesonly_filtered_gtFine_<split>.json``, images
under ``leftImg8bit/<split>/``).

Differences from ``CocoDataset``, mmdet's: in training an image is dropped when it has no
annotation of the 8 classes or when *all* its annotations are crowd ones; ``seg_map`` is the
image's ``segm_file`` (the json's). ``evaluate`` gives the COCO metrics over every image of the
json (mmdet's evaluate builds a ``CocoDataset`` on the same json); the ``'cityscapes'`` metric
(mmdet's instance-level AP through ``cityscapesscripts``) is not implemented: asking for it is
an error that says so.

Fix over mmdet 2.28.2, whose ``evaluate`` defaulted ``iou_thrs`` to ``np.arange(0.5, 0.96,
0.05)``: its 0.75 is 0.7500000000000002, which pycocotools' summary does not find, so
``bbox_mAP_75`` / ``segm_mAP_75`` came out -1. The default here is COCO's 0.50:0.05:0.95 (as
``CocoDataset``'s); every other number is mmdet's.
"""
from ..registry import DATASETS
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
        if 'cityscapes' in metrics:
            raise NotImplementedError(
                "metric 'cityscapes' (the Cityscapes instance-level AP of cityscapesscripts) "
                "is not implemented in ckptzoo; use the COCO metrics 'bbox' / 'segm'")
        if not self.test_mode and len(self.img_ids) != len(self.coco.get_img_ids()):
            raise ValueError('CityscapesDataset.evaluate scores every image of the json (as '
                             'mmdet); build the dataset with test_mode=True')
        return super().evaluate(results, metrics, logger, outfile_prefix, classwise,
                                proposal_nums, iou_thrs, metric_items)
