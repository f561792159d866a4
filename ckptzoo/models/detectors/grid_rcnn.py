"""mmdet 2.x ``GridRCNN`` (Grid R-CNN, Lu et al. 2019; Grid R-CNN Plus, 2019): a
:class:`TwoStageDetector` whose RoI head is a :class:`~ckptzoo.models.roi_heads.GridRoIHead`
(boxes located by grid points; ``roi_head.grid_head.*`` keys as mmdet)."""
from ...registry import MODELS
from .two_stage import TwoStageDetector

__all__ = ['GridRCNN']


@MODELS.register_module()
class GridRCNN(TwoStageDetector):
    """Args as mmdet 2.x (``rpn_head``, ``roi_head``, ``train_cfg`` and ``test_cfg`` are
    required, in that order after ``backbone``)."""

    def __init__(self, backbone, rpn_head, roi_head, train_cfg, test_cfg, neck=None,
                 pretrained=None, init_cfg=None):
        super().__init__(backbone=backbone, neck=neck, rpn_head=rpn_head, roi_head=roi_head,
                         train_cfg=train_cfg, test_cfg=test_cfg, pretrained=pretrained,
                         init_cfg=init_cfg)
