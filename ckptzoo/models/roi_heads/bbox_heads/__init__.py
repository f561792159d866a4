from .bbox_head import BBoxHead
from .convfc_bbox_head import ConvFCBBoxHead, Shared2FCBBoxHead, Shared4Conv1FCBBoxHead
from .double_bbox_head import DoubleConvFCBBoxHead
from .sabl_head import SABLHead
from .scnet_bbox_head import SCNetBBoxHead

__all__ = ['BBoxHead', 'ConvFCBBoxHead', 'Shared2FCBBoxHead', 'Shared4Conv1FCBBoxHead',
           'DoubleConvFCBBoxHead', 'SABLHead', 'SCNetBBoxHead']
from .dii_head import DIIHead  # noqa: E402

__all__ += ['DIIHead']
