"""mmdet 2.x ``VFNet``: a :class:`SingleStageDetector` with a VFNetHead."""
from ...registry import MODELS
from .single_stage import SingleStageDetector

__all__ = ['VFNet']


@MODELS.register_module()
class VFNet(SingleStageDetector):
    """VarifocalNet (Zhang et al. 2021); arguments as mmdet 2.x ``VFNet``."""

    def __init__(self, backbone, neck, bbox_head, train_cfg=None, test_cfg=None,
                 pretrained=None, init_cfg=None):
        super().__init__(backbone, neck, bbox_head, train_cfg, test_cfg, pretrained, init_cfg)
