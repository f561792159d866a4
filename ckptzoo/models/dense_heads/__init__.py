"""Dense (single-stage and RPN) heads, mmdet 2.x ``dense_heads``; ``level_units`` makes each
pyramid level of a head a checkpoint unit (ours: mmdet has no such module)."""
from .anchor_free_head import AnchorFreeHead
from .anchor_head import AnchorHead
from .atss_head import ATSSHead
from .base_dense_head import BaseDenseHead
from .gfl_head import GFLHead
from .cascade_rpn_head import CascadeRPNHead, StageCascadeRPNHead
from .retina_head import RetinaHead
from .rpn_head import RPNHead

__all__ = [
    'AnchorFreeHead',
    'AnchorHead',
    'ATSSHead',
    'BaseDenseHead',
    'CascadeRPNHead',
    'GFLHead',
    'StageCascadeRPNHead',
    'RetinaHead',
    'RPNHead',
]

from .reppoints_head import RepPointsHead  # noqa: E402

__all__ += ['RepPointsHead']

from .paa_head import PAAHead  # noqa: E402

__all__ += ['PAAHead']

from .fcos_head import FCOSHead  # noqa: E402

__all__ += ['FCOSHead']

from .nasfcos_head import NASFCOSHead  # noqa: E402

__all__ += ['NASFCOSHead']

from .autoassign_head import AutoAssignHead, CenterPrior  # noqa: E402

__all__ += ['AutoAssignHead', 'CenterPrior']

from .fovea_head import FeatureAlign, FoveaHead  # noqa: E402

__all__ += ['FeatureAlign', 'FoveaHead']

from .vfnet_head import VFNetHead  # noqa: E402

__all__ += ['VFNetHead']

from .lad_head import LADHead  # noqa: E402

__all__ += ['LADHead']
