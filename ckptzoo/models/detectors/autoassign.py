"""mmdet 2.x ``AutoAssign``: a :class:`SingleStageDetector` with an AutoAssignHead."""
from ...registry import MODELS
from .single_stage import SingleStageDetector

__all__ = ['AutoAssign']


@MODELS.register_module()
class AutoAssign(SingleStageDetector):
    """AutoAssign (Zhu et al. 2020); arguments as mmdet 2.x ``AutoAssign`` (which takes no
    ``init_cfg``)."""

    def __init__(self, backbone, neck, bbox_head, train_cfg=None, test_cfg=None,
                 pretrained=None):
        super().__init__(backbone, neck, bbox_head, train_cfg, test_cfg, pretrained)
