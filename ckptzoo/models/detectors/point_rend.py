"""mmdet 2.x ``PointRend`` (Kirillov et al. 2020): a :class:`TwoStageDetector` whose RoI head
is a ``PointRendRoIHead`` (coarse mask refined at uncertain points).

Keys ``backbone.*``, ``neck.*``, ``rpn_head.*``, ``roi_head.bbox_head.*``,
``roi_head.mask_head.*``, ``roi_head.point_head.*`` as mmdet, so its checkpoints load.
"""
from ...registry import MODELS
from .two_stage import TwoStageDetector

__all__ = ['PointRend']


@MODELS.register_module()
class PointRend(TwoStageDetector):
    """Args as mmdet 2.x (``rpn_head``, ``roi_head``, ``train_cfg`` and ``test_cfg`` are
    required, in that order after ``backbone``)."""

    def __init__(self, backbone, rpn_head, roi_head, train_cfg, test_cfg, neck=None,
                 pretrained=None, init_cfg=None):
        super().__init__(backbone=backbone, neck=neck, rpn_head=rpn_head, roi_head=roi_head,
                         train_cfg=train_cfg, test_cfg=test_cfg, pretrained=pretrained,
                         init_cfg=init_cfg)
