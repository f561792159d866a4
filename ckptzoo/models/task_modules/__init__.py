"""Anchors, box coding, assignment, sampling and NMS for detection heads (mmdet 2.x)."""
from .anchor_generator import AnchorGenerator
from .assign_result import AssignResult
from .bbox_overlaps import bbox_overlaps
from .bbox_transforms import (bbox2result, bbox2roi, bbox_flip, bbox_mapping,
                              bbox_mapping_back, roi2bbox)
from .delta_xywh_coder import DeltaXYWHBBoxCoder, bbox2delta, delta2bbox
from .max_iou_assigner import MaxIoUAssigner
from .merge_augs import merge_aug_bboxes, merge_aug_masks, merge_aug_scores
from .multiclass_nms import batched_nms, multiclass_nms, nms
from .pseudo_sampler import PseudoSampler
from .random_sampler import RandomSampler, sampling_at_capacity
from .sampling_result import SamplingResult

__all__ = ['AnchorGenerator', 'AssignResult', 'bbox_overlaps', 'bbox2result', 'bbox2roi',
           'roi2bbox', 'bbox_flip', 'bbox_mapping', 'bbox_mapping_back', 'DeltaXYWHBBoxCoder',
           'bbox2delta', 'delta2bbox', 'MaxIoUAssigner', 'merge_aug_bboxes', 'merge_aug_masks',
           'merge_aug_scores', 'batched_nms', 'multiclass_nms', 'nms', 'PseudoSampler',
           'RandomSampler', 'sampling_at_capacity', 'SamplingResult']
