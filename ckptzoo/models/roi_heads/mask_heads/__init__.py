from .fcn_mask_head import FCNMaskHead
from .fused_semantic_head import FusedSemanticHead
from .grid_head import GridHead
from .htc_mask_head import HTCMaskHead
from .maskiou_head import MaskIoUHead

__all__ = ['FCNMaskHead', 'FusedSemanticHead', 'GridHead', 'HTCMaskHead', 'MaskIoUHead']
