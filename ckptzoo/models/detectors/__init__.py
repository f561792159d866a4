from .base import BaseDetector
from .retinanet import RetinaNet
from .single_stage import SingleStageDetector, bbox2result

__all__ = ['BaseDetector', 'RetinaNet', 'SingleStageDetector', 'bbox2result']
