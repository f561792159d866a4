from .retinanet import RetinaNet
from .single_stage import SingleStageDetector, bbox2result

__all__ = ['RetinaNet', 'SingleStageDetector', 'bbox2result']
