"""The second stage of two-stage detectors (mmdet 2.x ``roi_heads``): RoI feature extraction
(``roi_extractors/``), box heads (``bbox_heads/``), the mask heads (``mask_heads/``), shared
heads (``shared_heads/``), the standard, cascade and mask scoring RoI heads."""
from .bbox_heads import BBoxHead, ConvFCBBoxHead, Shared2FCBBoxHead, Shared4Conv1FCBBoxHead
from .cascade_roi_head import CascadeRoIHead
from .mask_heads import FCNMaskHead, MaskIoUHead
from .mask_scoring_roi_head import MaskScoringRoIHead
from .roi_extractors import SingleRoIExtractor
from .shared_heads import ResLayer
from .standard_roi_head import StandardRoIHead

__all__ = ['BBoxHead', 'ConvFCBBoxHead', 'Shared2FCBBoxHead', 'Shared4Conv1FCBBoxHead',
           'CascadeRoIHead', 'FCNMaskHead', 'MaskIoUHead', 'MaskScoringRoIHead', 'ResLayer',
           'SingleRoIExtractor', 'StandardRoIHead']
