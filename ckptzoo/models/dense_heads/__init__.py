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
from .retina_sepbn_head import RetinaSepBNHead  # noqa: E402
__all__ += ['RetinaSepBNHead']
from .free_anchor_retina_head import FreeAnchorRetinaHead  # noqa: E402
__all__ += ['FreeAnchorRetinaHead']
from .pisa_retinanet_head import PISARetinaHead  # noqa: E402
__all__ += ['PISARetinaHead']
from .fsaf_head import FSAFHead  # noqa: E402
__all__ += ['FSAFHead']
from .yolof_head import YOLOFHead  # noqa: E402
__all__ += ['YOLOFHead']
