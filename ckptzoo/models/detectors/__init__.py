from .base import BaseDetector
from .cascade_rcnn import CascadeRCNN
from .faster_rcnn import FasterRCNN
from .htc import HybridTaskCascade
from .mask_rcnn import MaskRCNN
from .retinanet import RetinaNet
from .rpn import RPN
from .single_stage import SingleStageDetector, bbox2result
from .two_stage import TwoStageDetector

__all__ = ['BaseDetector', 'CascadeRCNN', 'FasterRCNN', 'HybridTaskCascade', 'MaskRCNN',
           'RetinaNet', 'RPN', 'SingleStageDetector', 'TwoStageDetector', 'bbox2result']
