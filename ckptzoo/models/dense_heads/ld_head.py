"""mmdet 2.x ``LDHead`` (Localization Distillation, Zheng et al. 2022): a GFLHead (same layers,
keys and ``level{i}`` checkpoint units) whose training also takes the teacher's box
distributions (``out_teacher[1]``) and adds ``loss_ld``, the KL divergence of the positives'
distributions from the teacher's, weighted as the DFL. Unlike GFL, the box losses are divided
by the sum of the box weights plus 1e-6 (mmdet's LD; GFL clamps it at 1)."""
import torch

from ...core.utils import reduce_mean
from ...registry import MODELS
from ...runner.fp16 import force_fp32
from .gfl_head import GFLHead

__all__ = ['LDHead']


@MODELS.register_module()
class LDHead(GFLHead):
    """Args: as :class:`GFLHead`, and ``loss_ld`` (KnowledgeDistillationKLDivLoss, 0.25, T 10
    in the configs; mmdet's default names a ``LocalizationDistillationLoss`` it never had)."""

    def __init__(self, num_classes, in_channels,
                 loss_ld=dict(type='KnowledgeDistillationKLDivLoss', loss_weight=0.25, T=10),
                 **kwargs):
        super().__init__(num_classes, in_channels, **kwargs)
        self.loss_ld = MODELS.build(loss_ld)

    def loss_single(self, anchors, cls_score, bbox_pred, labels, label_weights, bbox_targets,
                    stride, soft_targets, num_total_samples):
        """GFL's level losses and ``loss_ld``: ``(loss_cls, loss_bbox, loss_dfl, loss_ld, sum
        of the box weights)``."""
        loss_cls, loss_bbox, loss_dfl, weight_sum = super().loss_single(
            anchors, cls_score, bbox_pred, labels, label_weights, bbox_targets, stride,
            num_total_samples)
        bins = self.reg_max + 1
        labels = labels.reshape(-1)
        pos_inds = ((labels >= 0) & (labels < self.num_classes)).nonzero().squeeze(1)
        bbox_pred = bbox_pred.permute(0, 2, 3, 1).reshape(-1, 4 * bins)
        if len(pos_inds) > 0:
            scores = cls_score.permute(0, 2, 3, 1).reshape(-1, self.cls_out_channels)
            weight = scores.detach().sigmoid().max(dim=1)[0][pos_inds]
            soft = soft_targets.permute(0, 2, 3, 1).reshape(-1, 4 * bins)[pos_inds]
            loss_ld = self.loss_ld(bbox_pred[pos_inds].reshape(-1, bins), soft.reshape(-1, bins),
                                   weight=weight[:, None].expand(-1, 4).reshape(-1),
                                   avg_factor=4.0)
        else:
            loss_ld = bbox_pred.sum() * 0
        return loss_cls, loss_bbox, loss_dfl, loss_ld, weight_sum

    def forward_train(self, x, out_teacher, img_metas, gt_bboxes, gt_labels=None,
                      gt_bboxes_ignore=None, proposal_cfg=None, **kwargs):
        """The losses against the ground truth and the teacher's outputs ``out_teacher``
        (``(cls_scores, bbox_preds)``; the box distributions are the soft targets)."""
        outs = self(x)
        losses = self.loss(*outs, gt_bboxes, gt_labels, out_teacher[1], img_metas,
                           gt_bboxes_ignore=gt_bboxes_ignore)
        if proposal_cfg is None:
            return losses
        return losses, self.get_bboxes(*outs, img_metas=img_metas, cfg=proposal_cfg)

    @force_fp32(apply_to=('cls_scores', 'bbox_preds'))
    def loss(self, cls_scores, bbox_preds, gt_bboxes, gt_labels, soft_target, img_metas,
             gt_bboxes_ignore=None):
        """``dict(loss_cls, loss_bbox, loss_dfl, loss_ld)``, each a list over levels."""
        if not self.train_cfg:
            raise ValueError(f'LDHead.loss needs train_cfg (assigner, ...), got '
                             f'{self.train_cfg!r}')
        if len(soft_target) != len(cls_scores):
            raise ValueError(f'LDHead: the teacher gave {len(soft_target)} levels, the student '
                             f'{len(cls_scores)}')
        featmap_sizes = [f.size()[-2:] for f in cls_scores]
        if len(featmap_sizes) != self.prior_generator.num_levels:
            raise ValueError(f'got {len(featmap_sizes)} feature levels, the anchor generator '
                             f'has {self.prior_generator.num_levels} strides')
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
