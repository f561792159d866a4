from .fcn_mask_head import FCNMaskHead
from .fused_semantic_head import FusedSemanticHead
from .htc_mask_head import HTCMaskHead
from .maskiou_head import MaskIoUHead

__all__ = ['FCNMaskHead', 'FusedSemanticHead', 'HTCMaskHead', 'MaskIoUHead']
