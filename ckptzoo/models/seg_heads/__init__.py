from .base_semantic_head import BaseSemanticHead  # noqa: F401
from .panoptic_fpn_head import PanopticFPNHead  # noqa: F401
from .panoptic_fusion_heads import *  # noqa: F401,F403

__all__ = ['BaseSemanticHead']
__all__ += ['PanopticFPNHead']
__all__ += ['BasePanopticFusionHead']
__all__ += ['HeuristicFusionHead']
__all__ += ['MaskFormerFusionHead']
