"""Boxes (mmdet 2.x ``mmdet/core/bbox``): assignment, sampling, coding, IoU and transforms."""
from .assigners import AssignResult, MaxIoUAssigner, RegionAssigner
from .coder import DeltaXYWHBBoxCoder, LegacyDeltaXYWHBBoxCoder, bbox2delta, delta2bbox
from .iou_calculators import bbox_overlaps
from .samplers import (PseudoSampler, RandomSampler, SamplingResult,
                       restore_sampling_at_capacity, set_sampling_at_capacity)
from .transforms import (bbox2result, bbox2roi, bbox_flip, bbox_mapping, bbox_mapping_back,
                         roi2bbox)

__all__ = ['AssignResult', 'MaxIoUAssigner', 'RegionAssigner', 'DeltaXYWHBBoxCoder', 'LegacyDeltaXYWHBBoxCoder', 'bbox2delta', 'delta2bbox',
           'bbox_overlaps', 'PseudoSampler', 'RandomSampler', 'SamplingResult',
           'set_sampling_at_capacity', 'restore_sampling_at_capacity', 'bbox2result',
           'bbox2roi', 'bbox_flip', 'bbox_mapping', 'bbox_mapping_back', 'roi2bbox']

# SABL's coder and its proposal rescaling (kept apart: the lines above are shared edits)
from .coder import BucketingBBoxCoder  # noqa: E402
from .transforms import bbox_rescale  # noqa: E402

__all__ += ['BucketingBBoxCoder', 'bbox_rescale']

# anchor-free heads' distance coding
from .coder import DistancePointBBoxCoder  # noqa: E402
from .transforms import bbox2distance, distance2bbox  # noqa: E402

__all__ += ['DistancePointBBoxCoder', 'bbox2distance', 'distance2bbox']

# guided anchoring's / SABL's assigner
from .assigners import ApproxMaxIoUAssigner  # noqa: E402

__all__ += ['ApproxMaxIoUAssigner']

from .assigners import ATSSAssigner, TaskAlignedAssigner  # noqa: E402

__all__ += ['ATSSAssigner', 'TaskAlignedAssigner']

from .assigners import SimOTAAssigner  # noqa: E402

__all__ += ['SimOTAAssigner']

from .assigners import HungarianAssigner  # noqa: E402
from .match_costs import (BBoxL1Cost, ClassificationCost, CrossEntropyLossCost,  # noqa: E402
                          DiceCost, FocalLossCost, IoUCost, build_match_cost)
from .transforms import bbox_cxcywh_to_xyxy, bbox_xyxy_to_cxcywh  # noqa: E402

__all__ += ['HungarianAssigner', 'BBoxL1Cost', 'ClassificationCost', 'CrossEntropyLossCost',
            'DiceCost', 'FocalLossCost', 'IoUCost', 'build_match_cost', 'bbox_cxcywh_to_xyxy',
            'bbox_xyxy_to_cxcywh']
