from .bucketing_bbox_coder import BucketingBBoxCoder
from .distance_point_bbox_coder import DistancePointBBoxCoder
from .delta_xywh_bbox_coder import DeltaXYWHBBoxCoder, bbox2delta, delta2bbox
from .legacy_delta_xywh_bbox_coder import LegacyDeltaXYWHBBoxCoder

__all__ = ['BucketingBBoxCoder', 'DeltaXYWHBBoxCoder', 'DistancePointBBoxCoder', 'LegacyDeltaXYWHBBoxCoder',
           'bbox2delta', 'delta2bbox']
from .tblr_bbox_coder import TBLRBBoxCoder, bboxes2tblr, tblr2bboxes  # noqa: E402
__all__ += ['TBLRBBoxCoder', 'bboxes2tblr', 'tblr2bboxes']

# YOLOv3's coder (kept apart: the lines above are shared edits)
from .yolo_bbox_coder import YOLOBBoxCoder  # noqa: E402

__all__ += ['YOLOBBoxCoder']

from ..transforms import bbox2distance, distance2bbox  # noqa: E402

__all__ += ['bbox2distance', 'distance2bbox']
