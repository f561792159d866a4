"""mmdet 2.x ``AscendMaxIoUAssigner``: mmdet's batched form of :class:`MaxIoUAssigner` for
Ascend NPUs (all images at once, ground truths padded). It assigns as ``MaxIoUAssigner`` does
(``ssd/ascend_ssd300_coco.py`` was checked against mmdet's), so here it is that assigner under
its registry name, image by image."""
from ....registry import TASK_UTILS
from .max_iou_assigner import MaxIoUAssigner

__all__ = ['AscendMaxIoUAssigner']


@TASK_UTILS.register_module()
class AscendMaxIoUAssigner(MaxIoUAssigner):
    """Args as :class:`MaxIoUAssigner` (mmdet's)."""
