"""Anchors, box coding, assignment, sampling and NMS for detection heads (mmdet 2.x)."""
from .anchor_generator import AnchorGenerator
from .assign_result import AssignResult
from .bbox_overlaps import bbox_overlaps
from .delta_xywh_coder import DeltaXYWHBBoxCoder, bbox2delta, delta2bbox
from .max_iou_assigner import MaxIoUAssigner
from .pseudo_sampler import PseudoSampler
from .random_sampler import RandomSampler
from .sampling_result import SamplingResult

__all__ = ['AnchorGenerator', 'AssignResult', 'bbox_overlaps', 'DeltaXYWHBBoxCoder',
           'bbox2delta', 'delta2bbox', 'MaxIoUAssigner', 'PseudoSampler', 'RandomSampler',
           'SamplingResult']
