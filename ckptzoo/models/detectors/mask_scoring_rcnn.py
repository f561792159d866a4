"""mmdet 2.x ``MaskScoringRCNN`` (Huang et al. 2019): a :class:`TwoStageDetector` whose RoI
head is a :class:`~ckptzoo.models.roi_heads.MaskScoringRoIHead` (``roi_head.mask_iou_head.*``
as mmdet). ``simple_test`` returns ``[(bbox_results, (segm_results, mask_scores))]``."""
from ...registry import MODELS
from .two_stage import TwoStageDetector

__all__ = ['MaskScoringRCNN']


@MODELS.register_module()
class MaskScoringRCNN(TwoStageDetector):
    """Args as mmdet 2.x (``rpn_head``, ``roi_head``, ``train_cfg`` and ``test_cfg`` are
    required, in that order after ``backbone``)."""

    def __init__(self, backbone, rpn_head, roi_head, train_cfg, test_cfg, neck=None,
                 pretrained=None, init_cfg=None):
        super().__init__(backbone=backbone, neck=neck, rpn_head=rpn_head, roi_head=roi_head,
                         train_cfg=train_cfg, test_cfg=test_cfg, pretrained=pretrained,
                         init_cfg=init_cfg)
