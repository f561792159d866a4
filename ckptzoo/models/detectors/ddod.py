"""mmdet 2.x ``DDOD``: a :class:`SingleStageDetector` with a DDODHead."""
from ...registry import MODELS
from .single_stage import SingleStageDetector

__all__ = ['DDOD']


@MODELS.register_module()
class DDOD(SingleStageDetector):
    """Disentangled Dense Object Detector (Chen et al. 2021); arguments as mmdet 2.x
    ``DDOD``."""

    def __init__(self, backbone, neck, bbox_head, train_cfg=None, test_cfg=None,
                 pretrained=None, init_cfg=None):
        super().__init__(backbone, neck, bbox_head, train_cfg, test_cfg, pretrained, init_cfg)
