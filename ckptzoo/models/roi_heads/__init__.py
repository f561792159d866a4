"""The second stage of two-stage detectors (mmdet 2.x ``roi_heads``): RoI feature extraction,
box heads and the standard RoI head."""
from .bbox_head import BBoxHead
from .convfc_bbox_head import ConvFCBBoxHead, Shared2FCBBoxHead, Shared4Conv1FCBBoxHead
from .roi_align import RoIAlign
from .single_level_roi_extractor import SingleRoIExtractor
from .standard_roi_head import StandardRoIHead

__all__ = ['BBoxHead', 'ConvFCBBoxHead', 'Shared2FCBBoxHead', 'Shared4Conv1FCBBoxHead',
           'RoIAlign', 'SingleRoIExtractor', 'StandardRoIHead']
