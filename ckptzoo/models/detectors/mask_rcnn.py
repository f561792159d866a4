"""mmdet 2.x ``MaskRCNN`` (He et al. 2017): a :class:`TwoStageDetector` whose RoI head has a
mask branch (``StandardRoIHead`` with ``mask_roi_extractor`` and an ``FCNMaskHead``).

Keys ``backbone.*``, ``neck.*``, ``rpn_head.*``, ``roi_head.bbox_head.*``,
``roi_head.mask_head.*`` as mmdet, so mmdet 2.x Mask R-CNN checkpoints load.
``simple_test`` returns ``[(bbox_results, segm_results)]`` per image.
"""
from ...registry import MODELS
from .two_stage import TwoStageDetector

__all__ = ['MaskRCNN']


@MODELS.register_module()
class MaskRCNN(TwoStageDetector):
    """Args as mmdet 2.x (``rpn_head``, ``roi_head``, ``train_cfg`` and ``test_cfg`` are
    required, in that order after ``backbone``)."""

    def __init__(self, backbone, rpn_head, roi_head, train_cfg, test_cfg, neck=None,
                 pretrained=None, init_cfg=None):
        super().__init__(backbone=backbone, neck=neck, rpn_head=rpn_head, roi_head=roi_head,
                         train_cfg=train_cfg, test_cfg=test_cfg, pretrained=pretrained,
                         init_cfg=init_cfg)
