"""mmdet 2.x ``FSAF``: a :class:`SingleStageDetector` with an FSAFHead."""
from ...registry import MODELS
from .single_stage import SingleStageDetector

__all__ = ['FSAF']


@MODELS.register_module()
class FSAF(SingleStageDetector):
    """FSAF (Zhu et al. 2019); arguments as mmdet 2.x ``FSAF``."""

    def __init__(self, backbone, neck, bbox_head, train_cfg=None, test_cfg=None,
                 pretrained=None, init_cfg=None):
        super().__init__(backbone, neck, bbox_head, train_cfg, test_cfg, pretrained, init_cfg)
