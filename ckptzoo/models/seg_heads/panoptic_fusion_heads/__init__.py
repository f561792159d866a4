from .base_panoptic_fusion_head import BasePanopticFusionHead  # noqa: F401
from .heuristic_fusion_head import HeuristicFusionHead  # noqa: F401

__all__ = ['BasePanopticFusionHead']
__all__ += ['HeuristicFusionHead']

from .maskformer_fusion_head import MaskFormerFusionHead  # noqa: F401,E402

__all__ += ['MaskFormerFusionHead']
