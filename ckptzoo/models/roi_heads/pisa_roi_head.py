"""mmdet 2.x ``PISARoIHead`` (Prime Sample Attention, Cao et al. 2020): the box losses
reweighted by the samples' importance: ``train_cfg.isr`` (ISR-P, :func:`isr_p`) reweights the
positives' classification, ``train_cfg.carl`` adds ``loss_carl`` (:func:`carl_loss`), and a
sampler that returns ``(sampling_result, neg_label_weights)`` (mmdet's ``ScoreHLRSampler``,
ISR-N) sets the negatives' label weights.

The sampler is built with ``context=self`` when its class takes one (``ScoreHLRSampler``
scores the negatives with this head), and gets each image's features (``feats``).

Checkpoint units: :class:`StandardRoIHead`'s.
"""
import inspect

from ...core.bbox import bbox2roi
from ...registry import MODELS, TASK_UTILS
from ...utils.cfg_get import cfg_get
from ..losses import carl_loss, isr_p
from .standard_roi_head import StandardRoIHead

__all__ = ['PISARoIHead']


def _takes_context(cfg):
    cls = TASK_UTILS.get(cfg['type']) if isinstance(cfg.get('type'), str) else cfg.get('type')
    if cls is None:
        return False
    return 'context' in inspect.signature(cls.__init__).parameters


@MODELS.register_module()
class PISARoIHead(StandardRoIHead):
    """Args: :class:`StandardRoIHead`'s; ``train_cfg`` may also hold ``isr=dict(k, bias)``
    and ``carl=dict(k, bias)``."""

    TRAIN_CFG_KEYS = StandardRoIHead.TRAIN_CFG_KEYS + ('isr', 'carl')

    def init_assigner_sampler(self):
        super_sampler = self.train_cfg and cfg_get(self.train_cfg, 'sampler')
        if super_sampler and isinstance(super_sampler, dict) and 'type' in super_sampler \
                and _takes_context(super_sampler):
            self.bbox_assigner = TASK_UTILS.build(cfg_get(self.train_cfg, 'assigner'))
            self.bbox_sampler = TASK_UTILS.build(super_sampler,
                                                 default_args=dict(context=self))
            return
        super().init_assigner_sampler()

    def forward_train(self, x, img_metas, proposal_list, gt_bboxes, gt_labels,
                      gt_bboxes_ignore=None, gt_masks=None, **kwargs):
        """:meth:`StandardRoIHead.forward_train`'s losses, reweighted (see the module)."""
        if not self.train_cfg:
            raise ValueError(f'PISARoIHead.forward_train needs train_cfg, got '
                             f'{self.train_cfg!r}')
        if self.with_mask and gt_masks is None:
            raise ValueError('PISARoIHead with a mask head needs gt_masks to train')
        num_imgs = len(img_metas)
        if gt_bboxes_ignore is None:
            gt_bboxes_ignore = [None] * num_imgs
        sampling_results, neg_label_weights = [], []
        for i in range(num_imgs):
            assign_result = self.bbox_assigner.assign(proposal_list[i], gt_bboxes[i],
                                                      gt_bboxes_ignore[i], gt_labels[i])
            result = self.bbox_sampler.sample(assign_result, proposal_list[i], gt_bboxes[i],
                                              gt_labels[i],
                                              feats=[lvl_feat[i][None] for lvl_feat in x])
            neg_label_weight = None
            if isinstance(result, tuple):  # ISR-N: the negatives' label weights
                result, neg_label_weight = result
            sampling_results.append(result)
            neg_label_weights.append(neg_label_weight)
        losses = dict()
        bbox_results = self._bbox_forward_train(x, sampling_results, gt_bboxes, gt_labels,
                                                img_metas, neg_label_weights=neg_label_weights)
        losses.update(bbox_results['loss_bbox'])
        if self.with_mask:
            mask_results = self._mask_forward_train(x, sampling_results,
                                                    bbox_results['bbox_feats'], gt_masks,
                                                    img_metas)
            losses.update(mask_results['loss_mask'])
        return losses

    def _bbox_forward_train(self, x, sampling_results, gt_bboxes, gt_labels, img_metas,
                            neg_label_weights=None):
        rois = bbox2roi([res.bboxes for res in sampling_results])
        bbox_results = self._bbox_forward(x, rois)
        bbox_targets = self.bbox_head.get_targets(sampling_results, gt_bboxes, gt_labels,
                                                  self.train_cfg)
        if neg_label_weights and neg_label_weights[0] is not None:
            label_weights = bbox_targets[1]
            start = 0
            for res, weight in zip(sampling_results, neg_label_weights):
                num_pos, num_neg = res.pos_inds.size(0), res.neg_inds.size(0)
                if weight is not None:  # None: an image without negatives (mmdet fails)
                    label_weights[start + num_pos:start + num_pos + num_neg] = weight
                start += num_pos + num_neg
        cls_score, bbox_pred = bbox_results['cls_score'], bbox_results['bbox_pred']
        isr_cfg = cfg_get(self.train_cfg, 'isr')
        if isr_cfg is not None:
            bbox_targets = isr_p(cls_score, bbox_pred, bbox_targets, rois, sampling_results,
                                 self.bbox_head.loss_cls, self.bbox_head.bbox_coder,
                                 **isr_cfg, num_class=self.bbox_head.num_classes)
        loss_bbox = self.bbox_head.loss(cls_score, bbox_pred, rois, *bbox_targets)
        carl_cfg = cfg_get(self.train_cfg, 'carl')
        if carl_cfg is not None:
            loss_bbox.update(carl_loss(cls_score, bbox_targets[0], bbox_pred, bbox_targets[2],
                                       self.bbox_head.loss_bbox, **carl_cfg,
                                       num_class=self.bbox_head.num_classes))
        bbox_results.update(loss_bbox=loss_bbox)
        return bbox_results
