"""mmdet 2.x ``TOOD``: a :class:`SingleStageDetector` with a TOODHead, and ``set_epoch`` (called
by ``SetEpochInfoHook``) for the head's switch from ATSS to task-aligned training."""
from ...registry import MODELS
from .single_stage import SingleStageDetector

__all__ = ['TOOD']


@MODELS.register_module()
class TOOD(SingleStageDetector):
    """TOOD (Feng et al. 2021); arguments as mmdet 2.x ``TOOD``."""

    def __init__(self, backbone, neck, bbox_head, train_cfg=None, test_cfg=None,
                 pretrained=None, init_cfg=None):
        super().__init__(backbone, neck, bbox_head, train_cfg, test_cfg, pretrained, init_cfg)

    def set_epoch(self, epoch):
        self.bbox_head.epoch = epoch
