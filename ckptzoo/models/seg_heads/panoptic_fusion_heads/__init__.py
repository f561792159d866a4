from .base_panoptic_fusion_head import BasePanopticFusionHead  # noqa: F401
from .heuristic_fusion_head import HeuristicFusionHead  # noqa: F401

__all__ = ['BasePanopticFusionHead']
__all__ += ['HeuristicFusionHead']
