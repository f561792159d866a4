from .bucketing_bbox_coder import BucketingBBoxCoder
from .delta_xywh_bbox_coder import DeltaXYWHBBoxCoder, bbox2delta, delta2bbox
from .legacy_delta_xywh_bbox_coder import LegacyDeltaXYWHBBoxCoder

__all__ = ['BucketingBBoxCoder', 'DeltaXYWHBBoxCoder', 'LegacyDeltaXYWHBBoxCoder',
           'bbox2delta', 'delta2bbox']

from .distance_point_bbox_coder import (DistancePointBBoxCoder, bbox2distance,  # noqa: E402
                                        distance2bbox)

__all__ += ['DistancePointBBoxCoder', 'bbox2distance', 'distance2bbox']
