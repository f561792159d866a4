"""mmdet 2.x's match costs (registry MATCH_COST, here TASK_UTILS): ``[num_preds, num_gts]``
cost matrices for one-to-one assigners (``HungarianAssigner``, MaskFormer's)."""
from .match_cost import (BBoxL1Cost, ClassificationCost, CrossEntropyLossCost, DiceCost,
                         FocalLossCost, IoUCost, build_match_cost, pairwise_overlaps)

__all__ = ['BBoxL1Cost', 'ClassificationCost', 'CrossEntropyLossCost', 'DiceCost',
           'FocalLossCost', 'IoUCost', 'build_match_cost', 'pairwise_overlaps']
