"""mmdet 2.x ``FCOS``: a :class:`SingleStageDetector` with an FCOSHead."""
from ...registry import MODELS
from .single_stage import SingleStageDetector

__all__ = ['FCOS']


@MODELS.register_module()
class FCOS(SingleStageDetector):
    """FCOS (Tian et al. 2019); arguments as mmdet 2.x ``FCOS``."""

    def __init__(self, backbone, neck, bbox_head, train_cfg=None, test_cfg=None,
                 pretrained=None, init_cfg=None):
        super().__init__(backbone, neck, bbox_head, train_cfg, test_cfg, pretrained, init_cfg)
