"""mmdet 2.x ``NASFCOS``: a :class:`SingleStageDetector` (NASFCOS_FPN neck, an FCOS or
NASFCOS head)."""
from ...registry import MODELS
from .single_stage import SingleStageDetector

__all__ = ['NASFCOS']


@MODELS.register_module()
class NASFCOS(SingleStageDetector):
    """NAS-FCOS (Wang et al. 2020); arguments as mmdet 2.x ``NASFCOS``."""

    def __init__(self, backbone, neck, bbox_head, train_cfg=None, test_cfg=None,
                 pretrained=None, init_cfg=None):
        super().__init__(backbone, neck, bbox_head, train_cfg, test_cfg, pretrained, init_cfg)
