"""mmdet 2.x ``LADHead`` (Nguyen et al. 2021, label assignment distillation): a
:class:`PAAHead` whose anchors are assigned by a teacher's PAA assignment
(:meth:`get_label_assignment`, run on the teacher's predictions) instead of its own."""

from ...registry import MODELS
from ...runner.fp16 import force_fp32
from ..losses.iou_loss import aligned_overlaps
from .paa_head import PAAHead

__all__ = ['LADHead']


@MODELS.register_module()
class LADHead(PAAHead):
    """Arguments as :class:`PAAHead` (mmdet 2.x's)."""

    @force_fp32(apply_to=('cls_scores', 'bbox_preds', 'iou_preds'))
    def get_label_assignment(self, cls_scores, bbox_preds, iou_preds, gt_bboxes, gt_labels,
                             img_metas, gt_bboxes_ignore=None):
        """PAA's assignment from these (the teacher's) predictions: ``(labels,
        labels_weight, bboxes_target, bboxes_weight, pos_inds_flatten, pos_anchors,
        num_pos)`` (``pos_anchors`` None without positives)."""
        labels, labels_weight, bboxes_target, bboxes_weight, pos_inds_flatten, anchors, \
            num_pos = self._paa_assignment(cls_scores, bbox_preds, gt_bboxes, gt_labels,
                                           img_metas, gt_bboxes_ignore)
        pos_anchors = anchors[pos_inds_flatten] if num_pos else None
        return (labels, labels_weight, bboxes_target, bboxes_weight, pos_inds_flatten,
                pos_anchors, num_pos)

    def forward_train(self, x, label_assignment_results, img_metas, gt_bboxes, gt_labels=None,
                      gt_bboxes_ignore=None, **kwargs):
        """The losses of this (the student's) predictions under the teacher's
        ``label_assignment_results``."""
        outs = self(x)
        if gt_labels is None:
            return self.loss(*outs, gt_bboxes, img_metas, gt_bboxes_ignore=gt_bboxes_ignore,
                             label_assignment_results=label_assignment_results)
        return self.loss(*outs, gt_bboxes, gt_labels, img_metas,
                         gt_bboxes_ignore=gt_bboxes_ignore,
                         label_assignment_results=label_assignment_results)

    @force_fp32(apply_to=('cls_scores', 'bbox_preds', 'iou_preds'))
    def loss(self, cls_scores, bbox_preds, iou_preds, gt_bboxes, gt_labels, img_metas,
             gt_bboxes_ignore=None, label_assignment_results=None):
        """``dict(loss_cls, loss_bbox, loss_iou)`` under the given assignment; the box loss
        is unweighted, averaged over the positives (as mmdet)."""
        if label_assignment_results is None:
            raise ValueError('LADHead.loss needs label_assignment_results (the teacher\'s '
                             'get_label_assignment)')
        labels, labels_weight, bboxes_target, _, pos_inds_flatten, pos_anchors, num_pos = \
            label_assignment_results
        cls_scores, bbox_preds, iou_preds = self._flatten(cls_scores, bbox_preds, iou_preds,
                                                          self.cls_out_channels)
        losses_cls = self.loss_cls(cls_scores, labels, labels_weight,
                                   avg_factor=max(num_pos, len(img_metas)))
        if num_pos:
            pos_bbox_pred = self.bbox_coder.decode(pos_anchors, bbox_preds[pos_inds_flatten])
            pos_bbox_target = bboxes_target[pos_inds_flatten]
            iou_target = aligned_overlaps(pos_bbox_pred.detach(), pos_bbox_target)
            losses_iou = self.loss_centerness(iou_preds[pos_inds_flatten],
                                              iou_target.unsqueeze(-1), avg_factor=num_pos)
            losses_bbox = self.loss_bbox(pos_bbox_pred, pos_bbox_target, avg_factor=num_pos)
        else:
            losses_iou = iou_preds.sum() * 0
            losses_bbox = bbox_preds.sum() * 0
        return dict(loss_cls=losses_cls, loss_bbox=losses_bbox, loss_iou=losses_iou)
