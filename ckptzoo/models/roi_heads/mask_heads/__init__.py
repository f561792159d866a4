from .coarse_mask_head import CoarseMaskHead
from .fcn_mask_head import FCNMaskHead
from .fused_semantic_head import FusedSemanticHead
from .grid_head import GridHead
from .htc_mask_head import HTCMaskHead
from .mask_point_head import MaskPointHead
from .maskiou_head import MaskIoUHead

__all__ = ['CoarseMaskHead', 'FCNMaskHead', 'FusedSemanticHead', 'GridHead', 'HTCMaskHead',
           'MaskIoUHead', 'MaskPointHead']
