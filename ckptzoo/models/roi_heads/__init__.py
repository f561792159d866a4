"""The second stage of two-stage detectors (mmdet 2.x ``roi_heads``): RoI feature extraction
(``roi_extractors/``), box heads (``bbox_heads/``), the mask heads (``mask_heads/``), shared
heads (``shared_heads/``), the standard and the cascade RoI heads and their variants."""
from .bbox_heads import (BBoxHead, ConvFCBBoxHead, DoubleConvFCBBoxHead, SABLHead,
                         Shared2FCBBoxHead, Shared4Conv1FCBBoxHead)
from .cascade_roi_head import CascadeRoIHead
from .double_roi_head import DoubleHeadRoIHead
from .dynamic_roi_head import DynamicRoIHead
from .grid_roi_head import GridRoIHead
from .htc_roi_head import HybridTaskCascadeRoIHead
from .mask_heads import (CoarseMaskHead, FCNMaskHead, FusedSemanticHead, GridHead, HTCMaskHead,
                         MaskIoUHead, MaskPointHead)
from .mask_scoring_roi_head import MaskScoringRoIHead
from .pisa_roi_head import PISARoIHead
from .point_rend_roi_head import PointRendRoIHead
from .roi_extractors import GenericRoIExtractor, SingleRoIExtractor
from .shared_heads import ResLayer
from .standard_roi_head import StandardRoIHead
from .trident_roi_head import TridentRoIHead

__all__ = ['BBoxHead', 'ConvFCBBoxHead', 'Shared2FCBBoxHead', 'Shared4Conv1FCBBoxHead',
           'DoubleConvFCBBoxHead', 'SABLHead', 'CascadeRoIHead', 'DoubleHeadRoIHead',
           'DynamicRoIHead', 'FCNMaskHead', 'FusedSemanticHead', 'GridHead', 'GridRoIHead',
           'HTCMaskHead', 'HybridTaskCascadeRoIHead', 'MaskIoUHead', 'MaskScoringRoIHead',
           'PISARoIHead', 'CoarseMaskHead', 'MaskPointHead', 'PointRendRoIHead', 'ResLayer',
           'GenericRoIExtractor', 'SingleRoIExtractor', 'StandardRoIHead', 'TridentRoIHead']

from .bbox_heads import SCNetBBoxHead  # noqa: E402
from .mask_heads import (FeatureRelayHead, GlobalContextHead, SCNetMaskHead,  # noqa: E402
                         SCNetSemanticHead)
from .scnet_roi_head import SCNetRoIHead  # noqa: E402

__all__ += ['SCNetBBoxHead', 'FeatureRelayHead', 'GlobalContextHead', 'SCNetMaskHead',
            'SCNetSemanticHead', 'SCNetRoIHead']
from .bbox_heads import DIIHead  # noqa: E402
from .mask_heads import DynamicMaskHead  # noqa: E402
from .sparse_roi_head import SparseRoIHead  # noqa: E402

__all__ += ['DIIHead', 'DynamicMaskHead', 'SparseRoIHead']
