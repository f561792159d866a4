from .delta_xywh_bbox_coder import DeltaXYWHBBoxCoder, bbox2delta, delta2bbox

__all__ = ['DeltaXYWHBBoxCoder', 'bbox2delta', 'delta2bbox']
