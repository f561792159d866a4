"""mmdet 2.x ``FSAFHead`` (Zhu et al. 2019, Feature Selective Anchor-Free): RetinaHead's layers
(same keys, same ``level{i}`` checkpoint units) as an anchor-free branch: one prior per
position, boxes as ReLU'd (top, bottom, left, right) distances (``TBLRBBoxCoder``), targets
from ``CenterRegionAssigner``. Online feature selection: each ground truth trains only at the
pyramid level where its mean (classification + regression) loss is smallest; its positives at
the other levels are dropped from both losses."""
import torch

from ...core.anchor import anchor_inside_flags, images_to_levels
from ...core.utils import unmap
from ...registry import MODELS
from ...runner.fp16 import force_fp32
from ...utils.cfg_get import cfg_get
from ..losses import accuracy, weight_reduce_loss
from .retina_head import RetinaHead

__all__ = ['FSAFHead']


@MODELS.register_module()
class FSAFHead(RetinaHead):
    """FSAF head.

    Args:
        *args, **kwargs: :class:`RetinaHead` arguments; the mmdet configs give one anchor per
            position, ``reg_decoded_bbox=True``, ``TBLRBBoxCoder``, and ``reduction='none'``
            losses (the head reduces them itself).
        score_threshold (float | None): score a positive needs to count in ``pos_recall``.
        init_cfg (dict | None): default RetinaHead's with the ``retina_reg`` bias at 0.25.

    ``loss`` returns ``loss_cls``, ``loss_bbox`` (per level) and, for the log, ``num_pos``
    (positives per image) and ``pos_recall`` (percent of positives classified right).
    """

    def __init__(self, *args, score_threshold=None, init_cfg=None, **kwargs):
        if init_cfg is None:
            init_cfg = dict(type='Normal', layer='Conv2d', std=0.01,
                            override=[dict(type='Normal', name='retina_cls', std=0.01,
                                           bias_prob=0.01),
                                      dict(type='Normal', name='retina_reg', std=0.01,
                                           bias=0.25)])
        super().__init__(*args, init_cfg=init_cfg, **kwargs)
        self.score_threshold = score_threshold
        for name, loss in (('loss_cls', self.loss_cls), ('loss_bbox', self.loss_bbox)):
            if getattr(loss, 'reduction', 'none') != 'none':
                raise ValueError(f"FSAFHead reduces its losses itself: {name} needs "
                                 f"reduction='none', got {loss.reduction!r}")

    def forward_single(self, x):
        cls_score, bbox_pred = super().forward_single(x)
        return cls_score, self.relu(bbox_pred)

    # ---------------------------------------------------------------- targets
    def _get_targets_single(self, flat_anchors, valid_flags, gt_bboxes, gt_bboxes_ignore,
                            gt_labels, img_meta, label_channels=1, unmap_outputs=True):
        """AnchorHead's targets with label weights per class ``[A, label_channels]`` (the
        assigner's shadowed classes weighted 0), and each prior's 0-based gt index (-1: none)
        after the sampling result."""
        inside = anchor_inside_flags(flat_anchors, valid_flags, img_meta['img_shape'][:2],
                                     cfg_get(self.train_cfg, 'allowed_border', -1))
        if not inside.any():
            raise ValueError(f'no anchor lies inside image {img_meta.get("filename", "")!r} '
                             f'(img_shape {img_meta["img_shape"]})')
        anchors = flat_anchors[inside]
        assign_result = self.assigner.assign(anchors, gt_bboxes, gt_bboxes_ignore,
                                             None if self.sampling else gt_labels)
        sampling_result = self.sampler.sample(assign_result, anchors, gt_bboxes)
        num_valid = anchors.shape[0]
        bbox_targets = torch.zeros_like(anchors)
        bbox_weights = torch.zeros_like(anchors)
        labels = anchors.new_full((num_valid, ), self.num_classes, dtype=torch.long)
        label_weights = anchors.new_zeros((num_valid, label_channels), dtype=torch.float)
        pos_gt_inds = anchors.new_full((num_valid, ), -1, dtype=torch.long)
        pos_inds, neg_inds = sampling_result.pos_inds, sampling_result.neg_inds
        if len(pos_inds) > 0:
            if self.reg_decoded_bbox:
                pos_targets = sampling_result.pos_gt_bboxes
            else:
                pos_targets = self.bbox_coder.encode(sampling_result.pos_bboxes,
                                                     sampling_result.pos_gt_bboxes)
            bbox_targets[pos_inds, :] = pos_targets.to(bbox_targets.dtype)
            bbox_weights[pos_inds, :] = 1.0
            pos_gt_inds[pos_inds] = sampling_result.pos_assigned_gt_inds
            if gt_labels is None:
                labels[pos_inds] = 0
            else:
                labels[pos_inds] = gt_labels[sampling_result.pos_assigned_gt_inds].long()
            pos_weight = cfg_get(self.train_cfg, 'pos_weight', -1)
            label_weights[pos_inds] = 1.0 if pos_weight <= 0 else pos_weight
        if len(neg_inds) > 0:
            label_weights[neg_inds] = 1.0
        shadowed = getattr(assign_result, 'shadowed_labels', None)
        if shadowed is not None and shadowed.numel():
            if shadowed.dim() == 2:
                label_weights[shadowed[:, 0], shadowed[:, 1]] = 0
            else:
                label_weights[shadowed] = 0
        if unmap_outputs:
            total = flat_anchors.size(0)
            labels = unmap(labels, total, inside, fill=self.num_classes)
            label_weights = unmap(label_weights, total, inside)
            bbox_targets = unmap(bbox_targets, total, inside)
            bbox_weights = unmap(bbox_weights, total, inside)
            pos_gt_inds = unmap(pos_gt_inds, total, inside, fill=-1)
        return (labels, label_weights, bbox_targets, bbox_weights, pos_inds, neg_inds,
                sampling_result, pos_gt_inds)

    def get_targets(self, anchor_list, valid_flag_list, gt_bboxes_list, img_metas,
                    gt_bboxes_ignore_list=None, gt_labels_list=None, label_channels=1,
                    unmap_outputs=True):
        """AnchorHead's per-level targets and counts, then each prior's 0-based gt index
        (within its image; -1: none) per level ``[B, A_level]``."""
        num_imgs = len(img_metas)
        num_level_anchors = [a.size(0) for a in anchor_list[0]]
        ignores = gt_bboxes_ignore_list or [None] * num_imgs
        labels = gt_labels_list if gt_labels_list is not None else [None] * num_imgs
        results = [self._get_targets_single(
            torch.cat(anchor_list[i]), torch.cat(valid_flag_list[i]), gt_bboxes_list[i],
            ignores[i], labels[i], img_metas[i], label_channels, unmap_outputs)
            for i in range(num_imgs)]
        lbl, lbl_w, bbox_t, bbox_w, pos_inds, neg_inds, _, gt_inds = zip(*results)
        return (images_to_levels(lbl, num_level_anchors),
                images_to_levels(lbl_w, num_level_anchors),
                images_to_levels(bbox_t, num_level_anchors),
                images_to_levels(bbox_w, num_level_anchors),
                sum(max(i.numel(), 1) for i in pos_inds),
                sum(max(i.numel(), 1) for i in neg_inds),
                images_to_levels(gt_inds, num_level_anchors))

    # ------------------------------------------------------------------ loss
    @force_fp32(apply_to=('cls_scores', 'bbox_preds'))
    def loss(self, cls_scores, bbox_preds, gt_bboxes, gt_labels, img_metas,
             gt_bboxes_ignore=None):
        if not self.train_cfg:
            raise ValueError(f'FSAFHead.loss needs train_cfg, got {self.train_cfg!r}')
        bbox_preds = [b.clamp(min=1e-4) for b in bbox_preds]
        featmap_sizes = [f.size()[-2:] for f in cls_scores]
        if len(featmap_sizes) != self.prior_generator.num_levels:
            raise ValueError(f'got {len(featmap_sizes)} feature levels, the anchor generator '
                             f'has {self.prior_generator.num_levels} strides')
        batch_size = len(gt_bboxes)
        device = cls_scores[0].device
        anchor_list, valid_flag_list = self.get_anchors(featmap_sizes, img_metas, device)
        label_channels = self.cls_out_channels if self.use_sigmoid_cls else 1
        (labels_list, label_weights_list, bbox_targets_list, bbox_weights_list, num_total_pos,
         num_total_neg, gt_inds_list) = self.get_targets(
            anchor_list, valid_flag_list, gt_bboxes, img_metas,
            gt_bboxes_ignore_list=gt_bboxes_ignore, gt_labels_list=gt_labels,
            label_channels=label_channels)
        num_total_samples = num_total_pos + num_total_neg if self.sampling else num_total_pos
        num_level_anchors = [a.size(0) for a in anchor_list[0]]
        all_anchors = images_to_levels([torch.cat(a) for a in anchor_list], num_level_anchors)
        losses_cls, losses_bbox = [], []
        for args in zip(cls_scores, bbox_preds, all_anchors, labels_list, label_weights_list,
                        bbox_targets_list, bbox_weights_list):
            loss_cls, loss_bbox = self.loss_single(*args, num_total_samples=num_total_samples)
            losses_cls.append(loss_cls)
            losses_bbox.append(loss_bbox)
        # gt indices unique over the batch: image j's shifted by the gts of images before it
        counts = [len(g) for g in gt_labels]
        offsets = torch.tensor([0] + counts[:-1], device=device).cumsum(0)[:, None]
        gt_inds_list = [torch.where(g >= 0, g + offsets, g).flatten() for g in gt_inds_list]
        labels_list = [lbl.flatten() for lbl in labels_list]
        num_gts = sum(counts)
        with torch.no_grad():
            loss_levels = torch.stack([
                self.collect_loss_level_single(c, r, g, num_gts)
                for c, r, g in zip(losses_cls, losses_bbox, gt_inds_list)])
            if loss_levels.numel() == 0:
                argmin = loss_levels.new_empty((num_gts, ), dtype=torch.long)
            else:
                _, argmin = loss_levels.min(dim=0)
        losses_cls, losses_bbox, pos_inds = map(list, zip(*[
            self.reweight_loss_single(c, r, g, lbl, level, argmin)
            for level, (c, r, g, lbl) in enumerate(zip(losses_cls, losses_bbox, gt_inds_list,
                                                       labels_list))]))
        num_pos = torch.cat(pos_inds, 0).sum().float()
        pos_recall = self.calculate_pos_recall(cls_scores, labels_list, pos_inds)
        avg_factor = num_pos if num_pos > 0 else num_pos + float(num_total_neg)
        losses_cls = [c / avg_factor for c in losses_cls]
        losses_bbox = [b / avg_factor for b in losses_bbox]
        return dict(loss_cls=losses_cls, loss_bbox=losses_bbox, num_pos=num_pos / batch_size,
                    pos_recall=pos_recall)

    def calculate_pos_recall(self, cls_scores, labels_list, pos_inds):
        """Percent of the final positives whose best class is their label (and scores above
        ``score_threshold`` when set)."""
        with torch.no_grad():
            scores = torch.cat([c.permute(0, 2, 3, 1).reshape(-1, self.num_classes)[pos]
                                for c, pos in zip(cls_scores, pos_inds)])
            labels = torch.cat([lbl.reshape(-1)[pos] for lbl, pos in zip(labels_list,
                                                                          pos_inds)])
            scores = scores.sigmoid() if self.use_sigmoid_cls else scores.softmax(dim=1)
            return accuracy(scores, labels, thresh=self.score_threshold)

    @staticmethod
    def collect_loss_level_single(cls_loss, reg_loss, assigned_gt_inds, num_gts):
        """Per gt ``[num_gts]``: the mean over its priors at this level of the summed class
        and box losses; 1e6 where it has none here. (mmdet's takes ``labels_seq``, the range
        of gt indices; the count is enough.)"""
        if reg_loss.dim() == 2:
            reg_loss = reg_loss.sum(dim=-1)
        if cls_loss.dim() == 2:
            cls_loss = cls_loss.sum(dim=-1)
        loss = cls_loss + reg_loss
        if loss.size(0) != assigned_gt_inds.size(0):
            raise ValueError(f'{loss.size(0)} losses for {assigned_gt_inds.size(0)} priors')
        losses = loss.new_full((num_gts, ), 1e6)
        pos = assigned_gt_inds >= 0
        if pos.any():  # group by gt, keeping each group's order: the same means as masks
            inds, order = assigned_gt_inds[pos].sort(stable=True)
            values = loss[pos][order]
            gts, sizes = torch.unique_consecutive(inds, return_counts=True)
            for gt, chunk in zip(gts.tolist(), values.split(sizes.tolist())):
                losses[gt] = chunk.mean()
        return losses

    @staticmethod
    def reweight_loss_single(cls_loss, reg_loss, assigned_gt_inds, labels, level, min_levels):
        """Drop the positives whose gt trains at another level (their box loss, and the
        classification loss of their label), then sum: ``(cls, reg, final positive flags)``."""
        loc_weight = torch.ones_like(reg_loss)
        cls_weight = torch.ones_like(cls_loss)
        pos_flags = assigned_gt_inds >= 0
        if pos_flags.any():
            pos_indices = torch.nonzero(pos_flags, as_tuple=False).flatten()
            elsewhere = pos_indices[min_levels[assigned_gt_inds[pos_flags]] != level]
            if elsewhere.numel():
                pos_flags[elsewhere] = False
                loc_weight[elsewhere] = 0
                cls_weight[elsewhere, labels[elsewhere]] = 0
        return (weight_reduce_loss(cls_loss, cls_weight, reduction='sum'),
                weight_reduce_loss(reg_loss, loc_weight, reduction='sum'), pos_flags)
