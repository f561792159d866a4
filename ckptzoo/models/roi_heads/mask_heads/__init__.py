from .coarse_mask_head import CoarseMaskHead
from .fcn_mask_head import FCNMaskHead
from .feature_relay_head import FeatureRelayHead
from .fused_semantic_head import FusedSemanticHead
from .global_context_head import GlobalContextHead
from .grid_head import GridHead
from .htc_mask_head import HTCMaskHead
from .mask_point_head import MaskPointHead
from .maskiou_head import MaskIoUHead
from .scnet_mask_head import SCNetMaskHead
from .scnet_semantic_head import SCNetSemanticHead

__all__ = ['CoarseMaskHead', 'FCNMaskHead', 'FusedSemanticHead', 'GridHead', 'HTCMaskHead',
           'MaskIoUHead', 'MaskPointHead', 'FeatureRelayHead', 'GlobalContextHead',
           'SCNetMaskHead', 'SCNetSemanticHead']
from .dynamic_mask_head import DynamicMaskHead  # noqa: E402

__all__ += ['DynamicMaskHead']
