"""mmdet 2.x ``YOLOV3``: a :class:`SingleStageDetector` (Darknet / MobileNetV2, YOLOV3Neck,
YOLOV3Head)."""
from ...registry import MODELS
from .single_stage import SingleStageDetector

__all__ = ['YOLOV3']


@MODELS.register_module()
class YOLOV3(SingleStageDetector):
    """YOLOv3 (Redmon and Farhadi 2018); arguments as mmdet 2.x ``YOLOV3``."""

    def __init__(self, backbone, neck, bbox_head, train_cfg=None, test_cfg=None,
                 pretrained=None, init_cfg=None):
        super().__init__(backbone, neck, bbox_head, train_cfg, test_cfg, pretrained, init_cfg)
