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

from .guided_anchor_head import FeatureAdaption, GuidedAnchorHead  # noqa: E402
from .ga_retina_head import GARetinaHead  # noqa: E402
from .ga_rpn_head import GARPNHead  # noqa: E402

__all__ += ['FeatureAdaption', 'GuidedAnchorHead', 'GARetinaHead', 'GARPNHead']

from .sabl_retina_head import SABLRetinaHead  # noqa: E402

__all__ += ['SABLRetinaHead']
