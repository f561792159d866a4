"""The ops mmdet 2.x takes from ``mmcv.ops``, on torchvision and plain PyTorch (no compiled
mmcv): ``nms`` / ``batched_nms``, ``RoIAlign``. The lowest layer of the model code: it imports
nothing of ckptzoo."""
from .nms import batched_nms, nms, nms_match
from .roi_align import RoIAlign

__all__ = ['batched_nms', 'nms', 'nms_match', 'RoIAlign']
