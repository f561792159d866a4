"""The second stage of two-stage detectors (mmdet 2.x ``roi_heads``): RoI feature extraction
(``roi_extractors/``), box heads (``bbox_heads/``), the mask head (``mask_heads/``), the
standard and the cascade RoI heads."""
from .bbox_heads import BBoxHead, ConvFCBBoxHead, Shared2FCBBoxHead, Shared4Conv1FCBBoxHead
from .cascade_roi_head import CascadeRoIHead
from .htc_roi_head import HybridTaskCascadeRoIHead
from .mask_heads import FCNMaskHead, FusedSemanticHead, HTCMaskHead
from .roi_extractors import SingleRoIExtractor
from .standard_roi_head import StandardRoIHead

__all__ = ['BBoxHead', 'ConvFCBBoxHead', 'Shared2FCBBoxHead', 'Shared4Conv1FCBBoxHead',
           'CascadeRoIHead', 'FCNMaskHead', 'FusedSemanticHead', 'HTCMaskHead',
           'HybridTaskCascadeRoIHead', 'SingleRoIExtractor', 'StandardRoIHead']
