"""The second stage of two-stage detectors (mmdet 2.x ``roi_heads``): RoI feature extraction
(``roi_extractors/``), box heads (``bbox_heads/``), the mask heads (``mask_heads/``), shared
heads (``shared_heads/``), the standard and the cascade RoI heads and their variants."""
from .bbox_heads import (BBoxHead, ConvFCBBoxHead, DoubleConvFCBBoxHead, Shared2FCBBoxHead,
                         Shared4Conv1FCBBoxHead)
from .cascade_roi_head import CascadeRoIHead
from .double_roi_head import DoubleHeadRoIHead
from .dynamic_roi_head import DynamicRoIHead
from .grid_roi_head import GridRoIHead
from .htc_roi_head import HybridTaskCascadeRoIHead
from .mask_heads import FCNMaskHead, FusedSemanticHead, GridHead, HTCMaskHead, MaskIoUHead
from .mask_scoring_roi_head import MaskScoringRoIHead
from .pisa_roi_head import PISARoIHead
from .roi_extractors import GenericRoIExtractor, SingleRoIExtractor
from .shared_heads import ResLayer
from .standard_roi_head import StandardRoIHead

__all__ = ['BBoxHead', 'ConvFCBBoxHead', 'Shared2FCBBoxHead', 'Shared4Conv1FCBBoxHead',
           'DoubleConvFCBBoxHead', 'CascadeRoIHead', 'DoubleHeadRoIHead', 'DynamicRoIHead',
           'FCNMaskHead', 'FusedSemanticHead', 'GridHead', 'GridRoIHead', 'HTCMaskHead', 'HybridTaskCascadeRoIHead',
           'MaskIoUHead', 'MaskScoringRoIHead', 'PISARoIHead', 'ResLayer',
           'GenericRoIExtractor', 'SingleRoIExtractor', 'StandardRoIHead']
