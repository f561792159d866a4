from .fcn_mask_head import FCNMaskHead
from .fused_semantic_head import FusedSemanticHead
from .htc_mask_head import HTCMaskHead

__all__ = ['FCNMaskHead', 'HTCMaskHead', 'FusedSemanticHead']
