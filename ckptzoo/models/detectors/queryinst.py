"""mmdet 2.x ``QueryInst`` (Fang et al. 2021): :class:`SparseRCNN` whose ``SparseRoIHead`` has a
``DynamicMaskHead`` per stage (``roi_head.mask_head.{i}.*``), results ``(bbox, segm)``."""
from ...registry import MODELS
from .sparse_rcnn import SparseRCNN

__all__ = ['QueryInst']


@MODELS.register_module()
class QueryInst(SparseRCNN):
    """Args as mmdet 2.x's (``train_cfg`` and ``test_cfg`` required, as there)."""

    def __init__(self, backbone, rpn_head, roi_head, train_cfg, test_cfg, neck=None,
                 pretrained=None, init_cfg=None):
        super().__init__(backbone=backbone, neck=neck, rpn_head=rpn_head, roi_head=roi_head,
                         train_cfg=train_cfg, test_cfg=test_cfg, pretrained=pretrained,
                         init_cfg=init_cfg)
