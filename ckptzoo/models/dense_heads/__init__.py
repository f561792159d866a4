"""Dense (single-stage and RPN) heads, mmdet 2.x ``dense_heads``; ``level_units`` makes each
pyramid level of a head a checkpoint unit (ours: mmdet has no such module)."""
from .anchor_head import AnchorHead
from .base_dense_head import BaseDenseHead
from .cascade_rpn_head import CascadeRPNHead, StageCascadeRPNHead
from .retina_head import RetinaHead
from .rpn_head import RPNHead

__all__ = [
    'AnchorHead',
    'BaseDenseHead',
    'CascadeRPNHead',
    'StageCascadeRPNHead',
    'RetinaHead',
    'RPNHead',
]

# SSD's and YOLOv3's heads (kept apart: the lines above are shared edits)
from .ssd_head import SSDHead  # noqa: E402

__all__ += ['SSDHead']
from .yolo_head import YOLOV3Head  # noqa: E402

__all__ += ['YOLOV3Head']
from .ascend_ssd_head import AscendSSDHead  # noqa: E402

__all__ += ['AscendSSDHead']
from .pisa_ssd_head import PISASSDHead  # noqa: E402

__all__ += ['PISASSDHead']
