from .fcn_mask_head import FCNMaskHead
from .maskiou_head import MaskIoUHead

__all__ = ['FCNMaskHead', 'MaskIoUHead']
