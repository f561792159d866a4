from .iou2d_calculator import bbox_overlaps

__all__ = ['bbox_overlaps']
