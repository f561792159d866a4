"""mmdet 2.x ``PISARetinaHead`` (Cao et al. 2020, Prime Sample Attention): RetinaHead's layers
(same keys, same ``level{i}`` checkpoint units) whose losses run once over all levels of the
batch, with ``train_cfg.isr`` reweighting the positives' classification (:func:`isr_p`) and
``train_cfg.carl`` adding ``loss_carl`` (:func:`carl_loss`)."""
import torch

from ...core.anchor import images_to_levels
from ...registry import MODELS
from ...runner.fp16 import force_fp32
from ...utils.cfg_get import cfg_get
from ..losses import carl_loss, isr_p
from .retina_head import RetinaHead

__all__ = ['PISARetinaHead']


@MODELS.register_module()
class PISARetinaHead(RetinaHead):
    """PISA RetinaHead; arguments as :class:`RetinaHead`. ``train_cfg`` also takes ``isr``
    (``k``, ``bias``) and ``carl`` (``k``, ``bias``)."""

    TRAIN_CFG_KEYS = RetinaHead.TRAIN_CFG_KEYS + ('isr', 'carl')

    def get_targets(self, anchor_list, valid_flag_list, gt_bboxes_list, img_metas,
                    gt_bboxes_ignore_list=None, gt_labels_list=None, label_channels=1,
                    unmap_outputs=True, return_sampling_results=False):
        """:meth:`AnchorHead.get_targets`, and with ``return_sampling_results`` each image's
        sampling result last (ISR-P ranks the positives of each ground truth)."""
        if not return_sampling_results:
            return super().get_targets(anchor_list, valid_flag_list, gt_bboxes_list,
                                       img_metas, gt_bboxes_ignore_list, gt_labels_list,
                                       label_channels, unmap_outputs)
        num_imgs = len(img_metas)
        num_level_anchors = [a.size(0) for a in anchor_list[0]]
        ignores = gt_bboxes_ignore_list or [None] * num_imgs
        labels = gt_labels_list if gt_labels_list is not None else [None] * num_imgs
        results = [self._get_targets_single(
            torch.cat(anchor_list[i]), torch.cat(valid_flag_list[i]), gt_bboxes_list[i],
            ignores[i], labels[i], img_metas[i], label_channels, unmap_outputs)
            for i in range(num_imgs)]
        lbl, lbl_w, bbox_t, bbox_w, pos_inds, neg_inds, sampling = zip(*results)
        return (images_to_levels(lbl, num_level_anchors),
                images_to_levels(lbl_w, num_level_anchors),
                images_to_levels(bbox_t, num_level_anchors),
                images_to_levels(bbox_w, num_level_anchors),
                sum(max(i.numel(), 1) for i in pos_inds),
                sum(max(i.numel(), 1) for i in neg_inds), list(sampling))

    @force_fp32(apply_to=('cls_scores', 'bbox_preds'))
    def loss(self, cls_scores, bbox_preds, gt_bboxes, gt_labels, img_metas,
             gt_bboxes_ignore=None):
        """``dict(loss_cls, loss_bbox[, loss_carl])``, each one tensor over all levels."""
        if not self.train_cfg:
            raise ValueError(f'PISARetinaHead.loss needs train_cfg, got {self.train_cfg!r}')
        featmap_sizes = [f.size()[-2:] for f in cls_scores]
        if len(featmap_sizes) != self.prior_generator.num_levels:
            raise ValueError(f'got {len(featmap_sizes)} feature levels, the anchor generator '
                             f'has {self.prior_generator.num_levels} strides')
        anchor_list, valid_flag_list = self.get_anchors(featmap_sizes, img_metas,
                                                        cls_scores[0].device)
        label_channels = self.cls_out_channels if self.use_sigmoid_cls else 1
        (labels_list, label_weights_list, bbox_targets_list, bbox_weights_list, num_total_pos,
         num_total_neg, sampling_results) = self.get_targets(
            anchor_list, valid_flag_list, gt_bboxes, img_metas,
            gt_bboxes_ignore_list=gt_bboxes_ignore, gt_labels_list=gt_labels,
            label_channels=label_channels, return_sampling_results=True)
        num_total_samples = num_total_pos + num_total_neg if self.sampling else num_total_pos
        num_level_anchors = [a.size(0) for a in anchor_list[0]]
        all_anchors = images_to_levels([torch.cat(a) for a in anchor_list], num_level_anchors)
        num_imgs = len(img_metas)
        # image-major over all levels, as the sampling results list the positives
        scores = torch.cat([c.permute(0, 2, 3, 1).reshape(num_imgs, -1, label_channels)
                            for c in cls_scores], dim=1).reshape(-1, label_channels)
        preds = torch.cat([b.permute(0, 2, 3, 1).reshape(num_imgs, -1, 4)
                           for b in bbox_preds], dim=1).view(-1, 4)
        labels = torch.cat(labels_list, dim=1).reshape(-1)
        label_weights = torch.cat(label_weights_list, dim=1).reshape(-1)
        anchors = torch.cat(all_anchors, dim=1).reshape(-1, 4)
        bbox_targets = torch.cat(bbox_targets_list, dim=1).reshape(-1, 4)
        bbox_weights = torch.cat(bbox_weights_list, dim=1).reshape(-1, 4)
        isr_cfg = cfg_get(self.train_cfg, 'isr', None)
        if isr_cfg is not None:
            with torch.no_grad():
                labels, label_weights, bbox_targets, bbox_weights = isr_p(
                    scores, preds, (labels, label_weights, bbox_targets, bbox_weights),
                    anchors, sampling_results, bbox_coder=self.bbox_coder,
                    loss_cls=self.loss_cls, num_class=self.num_classes, **isr_cfg)
        losses = dict(
            loss_cls=self.loss_cls(scores, labels, label_weights,
                                   avg_factor=num_total_samples),
            loss_bbox=self.loss_bbox(preds, bbox_targets, bbox_weights,
                                     avg_factor=num_total_samples))
        carl_cfg = cfg_get(self.train_cfg, 'carl', None)
        if carl_cfg is not None:
            losses.update(carl_loss(scores, labels, preds, bbox_targets, self.loss_bbox,
                                    **carl_cfg, avg_factor=num_total_pos, sigmoid=True,
                                    num_class=self.num_classes))
        return losses
