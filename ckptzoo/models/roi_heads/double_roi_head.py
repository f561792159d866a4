"""mmdet 2.x ``DoubleHeadRoIHead`` (Double-Head R-CNN): the box head takes two RoI feature
maps, the RoIs as they are (classification) and enlarged by ``reg_roi_scale_factor`` about
their centres (regression), both from the one box RoI extractor.

Checkpoint units: :class:`StandardRoIHead`'s; the ``bbox`` unit covers both extractions and
the box head (``bbox_feats``, what a shared mask head takes, are the classification ones).
"""
from ...registry import MODELS
from .standard_roi_head import StandardRoIHead

__all__ = ['DoubleHeadRoIHead']


@MODELS.register_module()
class DoubleHeadRoIHead(StandardRoIHead):
    """Args (mmdet 2.x's): ``reg_roi_scale_factor`` (float, required), then
    :class:`StandardRoIHead`'s. The box head is a :class:`DoubleConvFCBBoxHead`
    (``forward(x_cls, x_reg)``)."""

    def __init__(self, reg_roi_scale_factor, **kwargs):
        super().__init__(**kwargs)
        self.reg_roi_scale_factor = reg_roi_scale_factor

    def _bbox_forward_unit(self, rois, *feats):
        feats = list(feats)
        bbox_cls_feats = self.bbox_roi_extractor(feats, rois)
        bbox_reg_feats = self.bbox_roi_extractor(feats, rois,
                                                 roi_scale_factor=self.reg_roi_scale_factor)
        cls_score, bbox_pred = self.bbox_head(bbox_cls_feats, bbox_reg_feats)
        return cls_score, bbox_pred, bbox_cls_feats
