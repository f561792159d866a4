"""mmdet 2.x ``RetinaNet``: a :class:`SingleStageDetector` with a RetinaHead."""
from ...registry import MODELS
from .single_stage import SingleStageDetector

__all__ = ['RetinaNet']


@MODELS.register_module()
class RetinaNet(SingleStageDetector):
    """RetinaNet (Lin et al. 2017); arguments as mmdet 2.x ``RetinaNet``."""

    def __init__(self, backbone, neck, bbox_head, train_cfg=None, test_cfg=None,
                 pretrained=None, init_cfg=None):
        super().__init__(backbone, neck, bbox_head, train_cfg, test_cfg, pretrained, init_cfg)
