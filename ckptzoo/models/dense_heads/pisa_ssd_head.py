"""mmdet 2.x ``PISASSDHead`` (PISA, Cao et al. 2020, on SSD): :class:`SSDHead` whose positives'
classification weights are re-ranked by ISR-P (``train_cfg.isr``) before the hard negative
mining, plus the classification-aware regression loss CARL (``train_cfg.carl``:
``loss_carl``). Without ``isr`` / ``carl`` it is ``SSDHead``.

mmdet computed the targets with ``unmap_outputs=False``, which misaligns them with the anchors
once an anchor lies beyond a padded image; here they are unmapped (the same wherever mmdet's
worked: SSD's ``allowed_border=-1`` and unpadded images)."""
import torch

from ...registry import MODELS
from ...runner.fp16 import force_fp32
from ...utils.cfg_get import cfg_get
from ..losses import CrossEntropyLoss, SmoothL1Loss
from ..losses.pisa_loss import carl_loss, isr_p
from .ssd_head import SSDHead

__all__ = ['PISASSDHead']


@MODELS.register_module()
class PISASSDHead(SSDHead):
    """Args as :class:`SSDHead`; ``train_cfg`` also takes ``isr=dict(k, bias)`` and
    ``carl=dict(k, bias)``."""

    TRAIN_CFG_KEYS = SSDHead.TRAIN_CFG_KEYS + ('isr', 'carl')

    @force_fp32(apply_to=('cls_scores', 'bbox_preds'))
    def loss(self, cls_scores, bbox_preds, gt_bboxes, gt_labels, img_metas,
             gt_bboxes_ignore=None):
        """``dict(loss_cls=[per image], loss_bbox=[per image])`` and, with ``carl``,
        ``loss_carl``."""
        if not self.train_cfg:
            raise ValueError(f'PISASSDHead.loss needs train_cfg, got {self.train_cfg!r}')
        featmap_sizes = [f.size()[-2:] for f in cls_scores]
        if len(featmap_sizes) != self.prior_generator.num_levels:
            raise ValueError(f'got {len(featmap_sizes)} feature levels, the anchor generator '
                             f'has {self.prior_generator.num_levels}')
        anchor_list, valid_flag_list = self.get_anchors(featmap_sizes, img_metas,
                                                        cls_scores[0].device)
        n = len(img_metas)
        ignores = gt_bboxes_ignore or [None] * n
        per_image = [self._get_targets_single(
            torch.cat(anchor_list[i]), torch.cat(valid_flag_list[i]), gt_bboxes[i], ignores[i],
            gt_labels[i], img_metas[i], 1, True) for i in range(n)]
        labels, label_weights, bbox_targets, bbox_weights, pos_inds, _, sampling_results = \
            zip(*per_image)
        num_total_pos = sum(max(inds.numel(), 1) for inds in pos_inds)
        all_cls_scores = torch.cat([s.permute(0, 2, 3, 1).reshape(n, -1, self.cls_out_channels)
                                    for s in cls_scores], 1)
        all_bbox_preds = torch.cat([b.permute(0, 2, 3, 1).reshape(n, -1, 4)
                                    for b in bbox_preds], -2)
        all_labels = torch.stack(labels)
        all_label_weights = torch.stack(label_weights)
        all_bbox_targets = torch.stack(bbox_targets)
        all_bbox_weights = torch.stack(bbox_weights)
        all_anchors = [torch.cat(a) for a in anchor_list]
        all_targets = (all_labels.view(-1), all_label_weights.view(-1),
                       all_bbox_targets.view(-1, 4), all_bbox_weights.view(-1, 4))
        isr = cfg_get(self.train_cfg, 'isr')
        if isr is not None:
            all_targets = isr_p(all_cls_scores.view(-1, all_cls_scores.size(-1)),
                                all_bbox_preds.view(-1, 4), all_targets,
                                torch.cat(all_anchors), list(sampling_results),
                                loss_cls=CrossEntropyLoss(), bbox_coder=self.bbox_coder,
                                **isr, num_class=self.num_classes)
            all_labels = all_targets[0].view(all_labels.shape)
            all_label_weights = all_targets[1].view(all_label_weights.shape)
            all_bbox_targets = all_targets[2].view(all_bbox_targets.shape)
            all_bbox_weights = all_targets[3].view(all_bbox_weights.shape)
        carl = cfg_get(self.train_cfg, 'carl')
        if carl is not None:
            loss_carl = carl_loss(all_cls_scores.view(-1, all_cls_scores.size(-1)),
                                  all_targets[0], all_bbox_preds.view(-1, 4), all_targets[2],
                                  SmoothL1Loss(beta=1.), **carl, avg_factor=num_total_pos,
                                  num_class=self.num_classes)
        if not (torch.isfinite(all_cls_scores).all() and torch.isfinite(all_bbox_preds).all()):
            raise FloatingPointError('PISASSDHead: classification scores or box predictions '
                                     'became infinite or NaN')
        losses_cls, losses_bbox = [], []
        for i in range(n):
            loss_cls, loss_bbox = self.loss_single(
                all_cls_scores[i], all_bbox_preds[i], all_anchors[i], all_labels[i],
                all_label_weights[i], all_bbox_targets[i], all_bbox_weights[i],
                num_total_samples=num_total_pos)
            losses_cls.append(loss_cls)
            losses_bbox.append(loss_bbox)
        losses = dict(loss_cls=losses_cls, loss_bbox=losses_bbox)
        if carl is not None:
            losses.update(loss_carl)
        return losses
