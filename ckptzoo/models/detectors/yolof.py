"""mmdet 2.x ``YOLOF``: a :class:`SingleStageDetector` on one feature level (a backbone's last
stage through ``DilatedEncoder``) with a YOLOFHead."""
from ...registry import MODELS
from .single_stage import SingleStageDetector

__all__ = ['YOLOF']


@MODELS.register_module()
class YOLOF(SingleStageDetector):
    """YOLOF (Chen et al. 2021); arguments as mmdet 2.x ``YOLOF``."""

    def __init__(self, backbone, neck, bbox_head, train_cfg=None, test_cfg=None,
                 pretrained=None, init_cfg=None):
        super().__init__(backbone, neck, bbox_head, train_cfg, test_cfg, pretrained, init_cfg)
