"""Dense (single-stage and RPN) heads, mmdet 2.x ``dense_heads``; ``level_units`` makes each
pyramid level of a head a checkpoint unit (ours: mmdet has no such module)."""
from .anchor_free_head import AnchorFreeHead
from .anchor_head import AnchorHead
from .base_dense_head import BaseDenseHead
from .cascade_rpn_head import CascadeRPNHead, StageCascadeRPNHead
from .retina_head import RetinaHead
from .rpn_head import RPNHead

__all__ = [
    'AnchorFreeHead',
    'AnchorHead',
    'BaseDenseHead',
    'CascadeRPNHead',
    'StageCascadeRPNHead',
    'RetinaHead',
    'RPNHead',
]
from .fcos_head import FCOSHead  # noqa: E402

__all__ += ['FCOSHead']

from .yolox_head import YOLOXHead  # noqa: E402

__all__ += ['YOLOXHead']
