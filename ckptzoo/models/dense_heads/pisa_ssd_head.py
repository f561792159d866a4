"""mmdet 2.x ``PISASSDHead`` (Cao et al. 2020, Prime Sample Attention, on SSD): SSDHead's
layers (same keys, same ``level{i}`` checkpoint units), whose targets are reweighted once over
the batch by ISR-P (``train_cfg.isr``) before the hard-negative-mined per-image losses, and
which adds CARL (``train_cfg.carl``, ``loss_carl``) on the softmax scores.

mmdet asked its targets with ``unmap_outputs=False``, which only matches the scores when every
anchor is inside the image (``allowed_border=-1``, as every SSD config); here the targets are
unmapped (identical there, and correct for any ``allowed_border``)."""
import torch

from ...core.anchor import images_to_levels
from ...registry import MODELS
from ...runner.fp16 import force_fp32
from ...utils.cfg_get import cfg_get
from ..losses import CrossEntropyLoss, SmoothL1Loss, carl_loss, isr_p
from .ssd_head import SSDHead

__all__ = ['PISASSDHead']


@MODELS.register_module()
class PISASSDHead(SSDHead):
    """PISA SSDHead; arguments as :class:`SSDHead`. ``train_cfg`` also takes ``isr``
    (``k``, ``bias``) and ``carl`` (``k``, ``bias``)."""

    TRAIN_CFG_KEYS = SSDHead.TRAIN_CFG_KEYS + ('isr', 'carl')

    def _targets_with_sampling(self, anchor_list, valid_flag_list, gt_bboxes_list, img_metas,
                               gt_bboxes_ignore_list, gt_labels_list):
        """:meth:`AnchorHead.get_targets` plus each image's sampling result (ISR-P ranks the
        positives of each ground truth)."""
        num_imgs = len(img_metas)
        num_level_anchors = [a.size(0) for a in anchor_list[0]]
        ignores = gt_bboxes_ignore_list or [None] * num_imgs
        results = [self._get_targets_single(
            torch.cat(anchor_list[i]), torch.cat(valid_flag_list[i]), gt_bboxes_list[i],
            ignores[i], gt_labels_list[i], img_metas[i], 1, True) for i in range(num_imgs)]
        lbl, lbl_w, bbox_t, bbox_w, pos_inds, _, sampling = zip(*results)
        return (images_to_levels(lbl, num_level_anchors),
                images_to_levels(lbl_w, num_level_anchors),
                images_to_levels(bbox_t, num_level_anchors),
                images_to_levels(bbox_w, num_level_anchors),
                sum(max(i.numel(), 1) for i in pos_inds), list(sampling))

    @force_fp32(apply_to=('cls_scores', 'bbox_preds'))
    def loss(self, cls_scores, bbox_preds, gt_bboxes, gt_labels, img_metas,
             gt_bboxes_ignore=None):
        """``dict(loss_cls=[per image], loss_bbox=[per image][, loss_carl])``."""
        if not self.train_cfg:
            raise ValueError(f'PISASSDHead.loss needs train_cfg, got {self.train_cfg!r}')
        featmap_sizes = [f.size()[-2:] for f in cls_scores]
        if len(featmap_sizes) != self.prior_generator.num_levels:
            raise ValueError(f'got {len(featmap_sizes)} feature levels, the anchor generator '
                             f'has {self.prior_generator.num_levels}')
        anchor_list, valid_flag_list = self.get_anchors(featmap_sizes, img_metas,
                                                        cls_scores[0].device)
        (labels_list, label_weights_list, bbox_targets_list, bbox_weights_list, num_total_pos,
         sampling_results) = self._targets_with_sampling(
            anchor_list, valid_flag_list, gt_bboxes, img_metas, gt_bboxes_ignore, gt_labels)
        n = len(img_metas)
        all_cls_scores = torch.cat([s.permute(0, 2, 3, 1).reshape(n, -1, self.cls_out_channels)
                                    for s in cls_scores], 1)
        all_bbox_preds = torch.cat([b.permute(0, 2, 3, 1).reshape(n, -1, 4)
                                    for b in bbox_preds], -2)
        all_labels = torch.cat(labels_list, -1).view(n, -1)
        all_label_weights = torch.cat(label_weights_list, -1).view(n, -1)
        all_bbox_targets = torch.cat(bbox_targets_list, -2).view(n, -1, 4)
        all_bbox_weights = torch.cat(bbox_weights_list, -2).view(n, -1, 4)
        all_anchors = [torch.cat(a) for a in anchor_list]
        targets = (all_labels.view(-1), all_label_weights.view(-1),
                   all_bbox_targets.view(-1, 4), all_bbox_weights.view(-1, 4))
        isr_cfg = cfg_get(self.train_cfg, 'isr', None)
        if isr_cfg is not None:
            with torch.no_grad():
                targets = isr_p(all_cls_scores.view(-1, self.cls_out_channels),
                                all_bbox_preds.view(-1, 4), targets, torch.cat(all_anchors),
                                sampling_results, loss_cls=CrossEntropyLoss(),
                                bbox_coder=self.bbox_coder, **isr_cfg,
                                num_class=self.num_classes)
            all_labels = targets[0].view(all_labels.shape)
            all_label_weights = targets[1].view(all_label_weights.shape)
            all_bbox_targets = targets[2].view(all_bbox_targets.shape)
            all_bbox_weights = targets[3].view(all_bbox_weights.shape)
        carl_cfg = cfg_get(self.train_cfg, 'carl', None)
        if carl_cfg is not None:
            loss_carl = carl_loss(all_cls_scores.view(-1, self.cls_out_channels), targets[0],
                                  all_bbox_preds.view(-1, 4), targets[2],
                                  SmoothL1Loss(beta=1.), **carl_cfg, avg_factor=num_total_pos,
                                  num_class=self.num_classes)
        if not torch.isfinite(all_cls_scores).all():
            raise FloatingPointError('PISASSDHead: classification scores are inf or NaN')
        if not torch.isfinite(all_bbox_preds).all():
            raise FloatingPointError('PISASSDHead: box predictions are inf or NaN')
        losses_cls, losses_bbox = [], []
        for i in range(n):
            loss_cls, loss_bbox = self.loss_single(
                all_cls_scores[i], all_bbox_preds[i], all_anchors[i], all_labels[i],
                all_label_weights[i], all_bbox_targets[i], all_bbox_weights[i],
                num_total_samples=num_total_pos)
            losses_cls.append(loss_cls)
            losses_bbox.append(loss_bbox)
        losses = dict(loss_cls=losses_cls, loss_bbox=losses_bbox)
        if carl_cfg is not None:
            losses.update(loss_carl)
        return losses
