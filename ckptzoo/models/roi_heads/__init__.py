"""The second stage of two-stage detectors (mmdet 2.x ``roi_heads``): RoI feature extraction
(``roi_extractors/``), box heads (``bbox_heads/``), the mask head (``mask_heads/``), the
standard and the cascade RoI heads and their variants."""
from .bbox_heads import (BBoxHead, ConvFCBBoxHead, DoubleConvFCBBoxHead, Shared2FCBBoxHead,
                         Shared4Conv1FCBBoxHead)
from .cascade_roi_head import CascadeRoIHead
from .double_roi_head import DoubleHeadRoIHead
from .dynamic_roi_head import DynamicRoIHead
from .mask_heads import FCNMaskHead
from .pisa_roi_head import PISARoIHead
from .roi_extractors import GenericRoIExtractor, SingleRoIExtractor
from .standard_roi_head import StandardRoIHead

__all__ = ['BBoxHead', 'ConvFCBBoxHead', 'Shared2FCBBoxHead', 'Shared4Conv1FCBBoxHead',
           'DoubleConvFCBBoxHead', 'CascadeRoIHead', 'DoubleHeadRoIHead', 'DynamicRoIHead',
           'FCNMaskHead', 'PISARoIHead', 'GenericRoIExtractor', 'SingleRoIExtractor',
           'StandardRoIHead']
