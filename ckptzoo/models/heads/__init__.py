"""Heads of classifiers, as mmcls 0.x lays out ``mmcls/models/heads`` (the heads of detectors
are in ``dense_heads`` and ``roi_heads``, as mmdet 2.x's)."""
from .linear_head import LinearClsHead, topk_accuracy

__all__ = ['LinearClsHead', 'topk_accuracy']
