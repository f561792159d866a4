"""Post-processing of detections (mmdet 2.x ``mmdet/core/post_processing``)."""
from .bbox_nms import multiclass_nms
from .merge_augs import aug_flip, merge_aug_bboxes, merge_aug_masks, merge_aug_scores

__all__ = ['multiclass_nms', 'aug_flip', 'merge_aug_bboxes', 'merge_aug_masks',
           'merge_aug_scores']
from .matrix_nms import mask_matrix_nms  # noqa: E402

__all__ += ['mask_matrix_nms']
from .bbox_nms import fast_nms  # noqa: E402
__all__ += ['fast_nms']
