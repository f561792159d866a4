"""mmdet 2.x ``FOVEA``: a :class:`SingleStageDetector` with a FoveaHead."""
from ...registry import MODELS
from .single_stage import SingleStageDetector

__all__ = ['FOVEA']


@MODELS.register_module()
class FOVEA(SingleStageDetector):
    """FoveaBox (Kong et al. 2019); arguments as mmdet 2.x ``FOVEA``."""

    def __init__(self, backbone, neck, bbox_head, train_cfg=None, test_cfg=None,
                 pretrained=None, init_cfg=None):
        super().__init__(backbone, neck, bbox_head, train_cfg, test_cfg, pretrained, init_cfg)
