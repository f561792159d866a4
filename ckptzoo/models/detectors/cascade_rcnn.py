"""mmdet 2.x ``CascadeRCNN`` (Cai & Vasconcelos 2018): a :class:`TwoStageDetector` whose RoI
head is a :class:`~ckptzoo.models.roi_heads.CascadeRoIHead` (box heads, and with masks mask
heads, per stage: ``roi_head.bbox_head.{i}.*``, ``roi_head.mask_head.{i}.*`` as mmdet)."""
from ...registry import MODELS
from .two_stage import TwoStageDetector

__all__ = ['CascadeRCNN']


@MODELS.register_module()
class CascadeRCNN(TwoStageDetector):
    """Args as mmdet 2.x ``CascadeRCNN`` (all but ``backbone`` optional, in this order)."""

    def __init__(self, backbone, neck=None, rpn_head=None, roi_head=None, train_cfg=None,
                 test_cfg=None, pretrained=None, init_cfg=None):
        super().__init__(backbone=backbone, neck=neck, rpn_head=rpn_head, roi_head=roi_head,
                         train_cfg=train_cfg, test_cfg=test_cfg, pretrained=pretrained,
                         init_cfg=init_cfg)

    def show_result(self, data, result, **kwargs):
        """As :meth:`BaseDetector.show_result`; a result of mmdet's multi-stage form (a dict
        whose ``'ensemble'`` entry holds the boxes, or with masks a pair of such dicts) is
        drawn from its ensemble, as mmdet does."""
        if self.with_mask:
            ms_bbox_result, ms_segm_result = result
            if isinstance(ms_bbox_result, dict):
                result = (ms_bbox_result['ensemble'], ms_segm_result['ensemble'])
        elif isinstance(result, dict):
            result = result['ensemble']
        return super().show_result(data, result, **kwargs)
