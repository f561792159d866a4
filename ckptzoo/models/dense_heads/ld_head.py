"""mmdet 2.x ``LDHead`` (Zheng et al. 2022, localization distillation): a :class:`GFLHead`
student that also learns each positive's box-side distributions from a teacher GFL head's
(``loss_ld``: :class:`KnowledgeDistillationKLDivLoss` of the student's ``reg_max + 1`` bins
against the teacher's, weighted as the box losses by the positive's best class score).

Layers, state-dict keys and checkpoint units are GFLHead's; ``loss_ld`` has no weights."""
import torch

from ...core.utils import reduce_mean
from ...registry import MODELS
from ...runner.fp16 import force_fp32
from .gfl_head import GFLHead

__all__ = ['LDHead']


@MODELS.register_module()
class LDHead(GFLHead):
    """Args: as :class:`GFLHead`, and ``loss_ld`` (default
    ``KnowledgeDistillationKLDivLoss(loss_weight=0.25, T=10)``; mmdet's default names
    ``LocalizationDistillationLoss``, a type mmdet never registered, so its head failed to
    build without an explicit ``loss_ld``: here the default is the loss mmdet's configs give).
    """

    def __init__(self, num_classes, in_channels,
                 loss_ld=dict(type='KnowledgeDistillationKLDivLoss', loss_weight=0.25, T=10),
                 **kwargs):
        super().__init__(num_classes, in_channels, **kwargs)
        self.loss_ld = MODELS.build(loss_ld)

    def forward_train(self, x, out_teacher, img_metas, gt_bboxes, gt_labels=None,
                      gt_bboxes_ignore=None, proposal_cfg=None, **kwargs):
        """The losses of this (the student's) predictions; ``out_teacher`` is the teacher
        head's output ``(cls_scores, bbox_preds)``, whose ``bbox_preds`` are the soft
        targets. With ``proposal_cfg`` also the boxes: ``(losses, proposal_list)``."""
        outs = self(x)
        losses = self.loss(*outs, gt_bboxes, gt_labels, out_teacher[1], img_metas,
                           gt_bboxes_ignore=gt_bboxes_ignore)
        if proposal_cfg is None:
            return losses
        return losses, self.get_bboxes(*outs, img_metas=img_metas, cfg=proposal_cfg)

    def loss_single(self, anchors, cls_score, bbox_pred, labels, label_weights, bbox_targets,
                    stride, soft_targets, num_total_samples):
        """One level: GFL's ``(loss_cls, loss_bbox, loss_dfl, box weight sum)`` and
        ``loss_ld``, the KL divergence of the positives' bins from the teacher's
        ``soft_targets [B, 4 * (reg_max + 1), H, W]`` (averaged over the 4 sides)."""
        loss_cls, loss_bbox, loss_dfl, weight_sum = super().loss_single(
            anchors, cls_score, bbox_pred, labels, label_weights, bbox_targets, stride,
            num_total_samples)
        bins = self.reg_max + 1
        if soft_targets.shape != bbox_pred.shape:
            raise ValueError(f'{type(self).__name__}: the teacher\'s box distributions '
                             f'{tuple(soft_targets.shape)} do not match the student\'s '
                             f'{tuple(bbox_pred.shape)}; teacher and student need the same '
                             'reg_max and strides')
        bbox_pred = bbox_pred.permute(0, 2, 3, 1).reshape(-1, 4 * bins)
        soft_targets = soft_targets.permute(0, 2, 3, 1).reshape(-1, 4 * bins)
        labels = labels.reshape(-1)
        pos_inds = ((labels >= 0) & (labels < self.num_classes)).nonzero().squeeze(1)
        if len(pos_inds) > 0:
            cls_score = cls_score.permute(0, 2, 3, 1).reshape(-1, self.cls_out_channels)
            weight = cls_score.detach().sigmoid().max(dim=1)[0][pos_inds]
            loss_ld = self.loss_ld(bbox_pred[pos_inds].reshape(-1, bins),
                                   soft_targets[pos_inds].reshape(-1, bins),
                                   weight=weight[:, None].expand(-1, 4).reshape(-1),
                                   avg_factor=4.0)
        else:
            loss_ld = bbox_pred.sum() * 0
        return loss_cls, loss_bbox, loss_dfl, loss_ld, weight_sum

    @force_fp32(apply_to=('cls_scores', 'bbox_preds', 'soft_target'))
    def loss(self, cls_scores, bbox_preds, gt_bboxes, gt_labels, soft_target, img_metas,
             gt_bboxes_ignore=None):
        """``dict(loss_cls, loss_bbox, loss_dfl, loss_ld)``, each a list over levels.
        ``soft_target``: the teacher's ``bbox_preds`` per level. As mmdet's LDHead (unlike
        its GFLHead, which clamps the sum at 1) the box losses are divided by the sum of the
        box weights plus 1e-6; ``loss_ld`` is not divided by it."""
        if not self.train_cfg:
            raise ValueError(f'{type(self).__name__}.loss needs train_cfg (assigner, ...), '
                             f'got {self.train_cfg!r}')
        featmap_sizes = [f.size()[-2:] for f in cls_scores]
        if len(featmap_sizes) != self.prior_generator.num_levels \
                or len(soft_target) != len(featmap_sizes):
            raise ValueError(f'got {len(featmap_sizes)} feature levels and {len(soft_target)} '
                             f'teacher levels, the anchor generator has '
                             f'{self.prior_generator.num_levels} strides')
        device = cls_scores[0].device
        anchor_list, valid_flag_list = self.get_anchors(featmap_sizes, img_metas, device)
        label_channels = self.cls_out_channels if self.use_sigmoid_cls else 1
        (anchor_list, labels_list, label_weights_list, bbox_targets_list, _, num_total_pos,
         _) = self.get_targets(anchor_list, valid_flag_list, gt_bboxes, img_metas,
                               gt_bboxes_ignore_list=gt_bboxes_ignore, gt_labels_list=gt_labels,
                               label_channels=label_channels)
        num_total_samples = max(reduce_mean(torch.tensor(
            num_total_pos, dtype=torch.float, device=device)).item(), 1.0)
        outs = [self.loss_single(*args, num_total_samples=num_total_samples) for args in zip(
            anchor_list, cls_scores, bbox_preds, labels_list, label_weights_list,
            bbox_targets_list, self.prior_generator.strides, soft_target)]
        losses_cls, losses_bbox, losses_dfl, losses_ld, avg_factor = zip(*outs)
        avg_factor = reduce_mean(sum(avg_factor) + 1e-6).item()
        return dict(loss_cls=list(losses_cls),
                    loss_bbox=[loss / avg_factor for loss in losses_bbox],
                    loss_dfl=[loss / avg_factor for loss in losses_dfl],
                    loss_ld=list(losses_ld))
