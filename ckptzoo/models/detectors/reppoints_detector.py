"""mmdet 2.x ``RepPointsDetector``: a :class:`SingleStageDetector` with a RepPointsHead."""
from ...registry import MODELS
from .single_stage import SingleStageDetector

__all__ = ['RepPointsDetector']


@MODELS.register_module()
class RepPointsDetector(SingleStageDetector):
    """RepPoints (Yang et al. 2019); arguments as mmdet 2.x ``RepPointsDetector``."""

    def __init__(self, backbone, neck, bbox_head, train_cfg=None, test_cfg=None,
                 pretrained=None, init_cfg=None):
        super().__init__(backbone, neck, bbox_head, train_cfg, test_cfg, pretrained, init_cfg)
