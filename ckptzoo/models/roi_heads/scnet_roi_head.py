"""mmdet 2.x ``SCNetRoIHead`` (SCNet, Vu et al. 2021): a :class:`CascadeRoIHead` (as in mmdet,
not an HTC subclass) with one mask head after the last stage, an optional semantic branch
(``SCNetSemanticHead``, pooled into box and mask RoI features), an optional global context
branch (``GlobalContextHead``: each image's pooled context added to its RoI features,
``loss_glbctx``) and an optional feature relay (``FeatureRelayHead``: the last box head's
shared feature of each positive RoI, added to its mask features).

Training, as mmdet 2.28.2: ``loss_semantic_seg``, ``loss_glbctx``, per stage ``s{i}.loss_cls``,
``s{i}.acc``, ``s{i}.loss_bbox`` (times ``stage_loss_weights[i]``; the stages refine by their
target labels, as mmdet's SCNet), then ``loss_mask`` on the last stage's positives, times the
sum of ``stage_loss_weights``.

Test: the cascade's boxes (mean scores), then the last box head run again on the detections
for the relayed feature, and the mask head.

Checkpoint units: ``semantic``, ``glbctx`` (each with its head), per stage ``bbox.{i}``
(extractor, semantic pooling, context fusion, box head), then ``mask`` (feature relay head,
mask extractor, semantic pooling, context fusion, mask head), in training order.

Fixes over mmdet, which leave its results otherwise equal: ``simple_test`` with
``rescale=False`` pools the detections' four coordinates (mmdet passed the score column too,
which ``RoIAlign`` refuses); without a ``feat_relay_head`` the test does not call the missing
head; ``forward_dummy`` runs the mask branch as training does (mmdet's took the cascade's and
failed); ``aug_test`` is not supported (an error).
"""
from functools import partial

import numpy as np
import torch
import torch.nn.functional as F

from ...core.bbox import bbox2result, bbox2roi
from ...registry import MODELS
from ..checkpointing import CheckpointUnit, unit_step
from ..utils.pretrained import load_pretrained
from .cascade_roi_head import CascadeRoIHead

__all__ = ['SCNetRoIHead']


@MODELS.register_module()
class SCNetRoIHead(CascadeRoIHead):
    """Args (mmdet 2.x's), besides :class:`CascadeRoIHead`'s (``mask_roi_extractor`` and
    ``mask_head`` are one config each, not one per stage):
        semantic_roi_extractor (dict | None), semantic_head (dict | None): the semantic branch.
        feat_relay_head (dict | None): a ``FeatureRelayHead``.
        glbctx_head (dict | None): a ``GlobalContextHead``.
    """

    def __init__(self, num_stages, stage_loss_weights, semantic_roi_extractor=None,
                 semantic_head=None, feat_relay_head=None, glbctx_head=None, **kwargs):
        super().__init__(num_stages, stage_loss_weights, **kwargs)
        owner = type(self).__name__
        if not (self.with_bbox and self.with_mask):
            raise ValueError(f'{owner} needs a box and a mask branch (as mmdet)')
        if semantic_head is not None:
            if semantic_roi_extractor is None:
                raise ValueError(f'{owner} semantic_head needs a semantic_roi_extractor')
            self.semantic_roi_extractor = MODELS.build(semantic_roi_extractor)
            self.semantic_head = MODELS.build(semantic_head)
        if feat_relay_head is not None:
            self.feat_relay_head = MODELS.build(feat_relay_head)
        if glbctx_head is not None:
            self.glbctx_head = MODELS.build(glbctx_head)
        flag = (kwargs.get('with_cp', False), kwargs.get('cp_use_reentrant', False))
        self.semantic_unit = CheckpointUnit.from_flag(*flag)
        self.glbctx_unit = CheckpointUnit.from_flag(*flag)
        self.mask_unit = CheckpointUnit.from_flag(*flag)

    def init_mask_head(self, mask_roi_extractor, mask_head):
        """One mask extractor and head (mmdet's: none without a ``mask_roi_extractor``)."""
        if mask_roi_extractor is not None:
            self.share_roi_extractor = False
            self.mask_roi_extractor = MODELS.build(mask_roi_extractor)
            self.mask_head = MODELS.build(mask_head)

    @property
    def with_semantic(self):
        return getattr(self, 'semantic_head', None) is not None

    @property
    def with_feat_relay(self):
        return getattr(self, 'feat_relay_head', None) is not None

    @property
    def with_glbctx(self):
        return getattr(self, 'glbctx_head', None) is not None

    def init_weights(self):
        """Load a ``Pretrained`` init_cfg, then let every part load its own (one mask head,
        not the cascade's list)."""
        if isinstance(self.init_cfg, dict) and self.init_cfg.get('type') == 'Pretrained':
            load_pretrained(self, self.init_cfg, type(self).__name__)
        parts = [*self.bbox_roi_extractor, *self.bbox_head, self.mask_roi_extractor,
                 self.mask_head] + [getattr(self, name, None) for name in (
                     'semantic_roi_extractor', 'semantic_head', 'feat_relay_head',
                     'glbctx_head')]
        for m in parts:
            if m is not None and hasattr(m, 'init_weights'):
                m.init_weights()

    # ----------------------------------------------------------------------- checkpoint units
    def _extras(self):
        return ([self.semantic_roi_extractor] if self.with_semantic else [])

    def _bbox_modules(self, stage):
        return super()._bbox_modules(stage) + self._extras()

    def _mask_modules(self, stage=None):
        return ([self.feat_relay_head] if self.with_feat_relay else []) + [
            self.mask_roi_extractor, self.mask_head] + self._extras()

    def _checkpoint_steps(self):
        """``semantic``, ``glbctx`` (those present), per stage ``bbox.{i}``, then ``mask``."""
        steps = []
        if self.with_semantic:
            steps.append([unit_step('semantic', self.semantic_unit, self._semantic_unit_fn,
                                    self.semantic_head)])
        if self.with_glbctx:
            steps.append([unit_step('glbctx', self.glbctx_unit, self._glbctx_unit_fn,
                                    self.glbctx_head)])
        for i in range(self.num_stages):
            steps.append([unit_step(f'bbox.{i}', self.bbox_units[i],
                                    partial(self._bbox_forward_unit, i), self._bbox_modules(i))])
        steps.append([unit_step('mask', self.mask_unit, self._mask_forward_unit,
                                self._mask_modules())])
        return steps

    def _semantic_unit_fn(self, *feats):
        return self.semantic_head(feats)

    def _glbctx_unit_fn(self, *feats):
        return self.glbctx_head(feats)

    def _fuse(self, roi_feats, rois, extra):
        """``roi_feats`` plus the pooled semantic feature and each RoI's image context, from
        ``extra`` (the semantic feature, then the context, those present)."""
        extra = list(extra)
        if self.with_semantic:
            sem = self.semantic_roi_extractor([extra.pop(0)], rois)
            if sem.shape[-2:] != roi_feats.shape[-2:]:
                sem = F.adaptive_avg_pool2d(sem, roi_feats.shape[-2:])
            roi_feats = roi_feats + sem
        if self.with_glbctx:
            roi_feats = roi_feats + extra.pop(0)[rois[:, 0].long()]
        return roi_feats, extra

    def _bbox_forward_unit(self, stage, rois, *feats):
        """``feats``: the extractor's levels, then the semantic feature and the context."""
        n = self.bbox_roi_extractor[stage].num_inputs
        bbox_feats, _ = self._fuse(self.bbox_roi_extractor[stage](list(feats[:n]), rois),
                                   rois, feats[n:])
        return self.bbox_head[stage](bbox_feats, return_shared_feat=True)

    def _mask_forward_unit(self, rois, *feats):
        """``feats``: the levels, the semantic feature and context, then the relayed box
        features (with a feature relay head)."""
        n = self.mask_roi_extractor.num_inputs
        mask_feats, rest = self._fuse(self.mask_roi_extractor(list(feats[:n]), rois), rois,
                                      feats[n:])
        if self.with_feat_relay:
            relayed = self.feat_relay_head(rest[0])
            if relayed is not None:
                mask_feats = mask_feats + relayed
        return self.mask_head(mask_feats)

    def _extra_inputs(self, semantic_feat, glbctx_feat):
        return ((semantic_feat, ) if self.with_semantic else ()) + (
            (glbctx_feat, ) if self.with_glbctx else ())

    def _branches(self, x):
        """``(semantic_pred, semantic_feat)`` and ``(mc_pred, glbctx_feat)`` (None when
        absent), through their units."""
        sem = self.semantic_unit(self._semantic_unit_fn, *x, module=self.semantic_head) \
            if self.with_semantic else (None, None)
        ctx = self.glbctx_unit(self._glbctx_unit_fn, *x, module=self.glbctx_head) \
            if self.with_glbctx else (None, None)
        return sem, ctx

    def _bbox_forward(self, stage, x, rois, semantic_feat=None, glbctx_feat=None):
        """Stage ``stage``'s box head outputs and shared feature, through its unit."""
        args = tuple(x[:self.bbox_roi_extractor[stage].num_inputs]) + self._extra_inputs(
            semantic_feat, glbctx_feat)
        cls_score, bbox_pred, relayed_feat = self.bbox_units[stage](
            partial(self._bbox_forward_unit, stage), rois, *args,
            module=self._bbox_modules(stage))
        return dict(cls_score=cls_score, bbox_pred=bbox_pred, relayed_feat=relayed_feat)

    def _mask_forward(self, x, rois, semantic_feat=None, glbctx_feat=None,
                      relayed_feat=None):
        """The mask logits for ``rois``, through the ``mask`` unit."""
        args = tuple(x[:self.mask_roi_extractor.num_inputs]) + self._extra_inputs(
            semantic_feat, glbctx_feat) + ((relayed_feat, ) if self.with_feat_relay else ())
        mask_pred = self.mask_unit(self._mask_forward_unit, rois, *args,
                                   module=self._mask_modules())
        return dict(mask_pred=mask_pred)

    # ------------------------------------------------------------------------------ forward
    def forward_dummy(self, x, proposals):
        """Every stage's cls_score and bbox_pred on ``proposals``, then the mask logits of
        the first 100 (FLOP counting)."""
        (_, semantic_feat), (_, glbctx_feat) = self._branches(x)
        rois = bbox2roi([proposals])
        outs = ()
        for i in range(self.num_stages):
            res = self._bbox_forward(i, x, rois, semantic_feat, glbctx_feat)
            outs = outs + (res['cls_score'], res['bbox_pred'])
        mask_rois = rois[:100]
        relayed = self._bbox_forward(-1, x, mask_rois, semantic_feat,
                                     glbctx_feat)['relayed_feat']
        return outs + (self._mask_forward(x, mask_rois, semantic_feat, glbctx_feat,
                                          relayed)['mask_pred'], )

    @staticmethod
    def _slice_pos_feats(feats, sampling_results):
        """The rows of each image's positives (first in its block of sampled RoIs)."""
        blocks = feats.split([res.bboxes.size(0) for res in sampling_results], 0)
        return torch.cat([b[:res.pos_bboxes.size(0)]
                          for b, res in zip(blocks, sampling_results)])

    def forward_train(self, x, img_metas, proposal_list, gt_bboxes, gt_labels,
                      gt_bboxes_ignore=None, gt_masks=None, gt_semantic_seg=None, **kwargs):
        """``loss_semantic_seg``, ``loss_glbctx`` (those present), per stage
        ``s{i}.loss_cls``, ``s{i}.acc``, ``s{i}.loss_bbox``, then ``loss_mask``."""
        owner = type(self).__name__
        if not self.train_cfg:
            raise ValueError(f'{owner}.forward_train needs train_cfg (one dict per stage), '
                             f'got {self.train_cfg!r}')
        num_imgs = len(img_metas)
        if not (len(proposal_list) == len(gt_bboxes) == len(gt_labels) == num_imgs):
            raise ValueError(f'proposal_list, gt_bboxes and gt_labels need one entry per image '
                             f'({num_imgs}), got {len(proposal_list)}, {len(gt_bboxes)}, '
                             f'{len(gt_labels)}')
        if gt_masks is None:
            raise ValueError(f'{owner} needs gt_masks to train')
        if self.with_semantic and gt_semantic_seg is None:
            raise ValueError(f"{owner} with a semantic_head needs gt_semantic_seg to train "
                             "(LoadAnnotations(with_seg=True), SegRescale and Collect "
                             "keys=[..., 'gt_semantic_seg'])")
        if gt_bboxes_ignore is None:
            gt_bboxes_ignore = [None] * num_imgs
        losses = dict()
        (semantic_pred, semantic_feat), (mc_pred, glbctx_feat) = self._branches(x)
        if self.with_semantic:
            losses['loss_semantic_seg'] = self.semantic_head.loss(semantic_pred,
                                                                  gt_semantic_seg)
        if self.with_glbctx:
            losses['loss_glbctx'] = self.glbctx_head.loss(mc_pred, gt_labels)
        for i in range(self.num_stages):
            self.current_stage = i
            rcnn_train_cfg = self.train_cfg[i]
            lw = self.stage_loss_weights[i]
            sampling_results = self._sample(i, x, img_metas, proposal_list, gt_bboxes,
                                            gt_labels, gt_bboxes_ignore)
            rois = bbox2roi([res.bboxes for res in sampling_results])
            bbox_results = self._bbox_forward(i, x, rois, semantic_feat, glbctx_feat)
            head = self.bbox_head[i]
            bbox_targets = head.get_targets(sampling_results, gt_bboxes, gt_labels,
                                            rcnn_train_cfg)
            loss_bbox = head.loss(bbox_results['cls_score'], bbox_results['bbox_pred'], rois,
                                  *bbox_targets)
            for name, value in loss_bbox.items():
                losses[f's{i}.{name}'] = value * lw if 'loss' in name else value
            if i < self.num_stages - 1:
                pos_is_gts = [res.pos_is_gt for res in sampling_results]
                with torch.no_grad():
                    proposal_list = head.refine_bboxes(rois, bbox_targets[0],
                                                       bbox_results['bbox_pred'], pos_is_gts,
                                                       img_metas)
        relayed_feat = self._slice_pos_feats(bbox_results['relayed_feat'], sampling_results) \
            if self.with_feat_relay else None
        pos_rois = bbox2roi([res.pos_bboxes for res in sampling_results])
        mask_pred = self._mask_forward(x, pos_rois, semantic_feat, glbctx_feat,
                                       relayed_feat)['mask_pred']
        mask_targets = self.mask_head.get_targets(sampling_results, gt_masks, rcnn_train_cfg)
        pos_labels = torch.cat([res.pos_gt_labels for res in sampling_results])
        loss_mask = self.mask_head.loss(mask_pred, mask_targets, pos_labels)['loss_mask']
        losses['loss_mask'] = sum(self.stage_loss_weights) * loss_mask
        return losses

    # --------------------------------------------------------------------------------- test
    def simple_test(self, x, proposal_list, img_metas, proposals=None, rescale=False):
        """Per image ``(bbox_results, segm_results)`` (mmdet's format)."""
        rois, empty = self._test_rois(proposal_list, proposals)
        if empty is not None:
            return empty
        num_imgs = len(proposal_list)
        num_classes = self.bbox_head[-1].num_classes
        mask_classes = self.mask_head.num_classes
        (_, semantic_feat), (_, glbctx_feat) = self._branches(x)
        extra = dict(semantic_feat=semantic_feat, glbctx_feat=glbctx_feat)
        num_per_img = tuple(len(p) for p in proposal_list)
        rois, cls_score, bbox_pred = self._refined_stages(x, rois, img_metas, num_per_img,
                                                          **extra)
        det_bboxes, det_labels = [], []
        for i, meta in enumerate(img_metas):
            det_bbox, det_label = self.bbox_head[-1].get_bboxes(
                rois[i], cls_score[i], bbox_pred[i], meta['img_shape'], meta['scale_factor'],
                rescale=rescale, cfg=self.test_cfg)
            det_bboxes.append(det_bbox)
            det_labels.append(det_label)
        bbox_results = [bbox2result(det_bboxes[i], det_labels[i], num_classes)
                        for i in range(num_imgs)]
        if all(det_bbox.shape[0] == 0 for det_bbox in det_bboxes):
            return [(b, [[] for _ in range(mask_classes)]) for b in bbox_results]
        scale_factors = [meta['scale_factor'] for meta in img_metas]
        if rescale and not isinstance(scale_factors[0], float):
            scale_factors = [torch.as_tensor(np.asarray(s)).to(det_bboxes[0].device)
                             for s in scale_factors]
        _bboxes = [det_bboxes[i][:, :4] * scale_factors[i] if rescale else det_bboxes[i][:, :4]
                   for i in range(num_imgs)]
        mask_rois = bbox2roi(_bboxes)
        relayed = self._bbox_forward(-1, x, mask_rois, **extra)['relayed_feat']
        mask_pred = self._mask_forward(x, mask_rois, relayed_feat=relayed, **extra)['mask_pred']
        mask_preds = mask_pred.split(tuple(len(b) for b in _bboxes), 0)
        segm_results = []
        for i, meta in enumerate(img_metas):
            if det_bboxes[i].shape[0] == 0:
                segm_results.append([[] for _ in range(mask_classes)])
            else:
                segm_results.append(self.mask_head.get_seg_masks(
                    mask_preds[i], _bboxes[i], det_labels[i], self.test_cfg,
                    meta['ori_shape'], scale_factors[i], rescale))
        return list(zip(bbox_results, segm_results))

    def simple_test_mask(self, *args, **kwargs):
        raise NotImplementedError(f'{type(self).__name__} tests its masks in simple_test '
                                  '(with the relayed feature and the context)')

    def _aug_test_feats(self, x):
        (_, semantic_feat), (_, glbctx_feat) = self._branches(x)
        return dict(semantic_feat=semantic_feat, glbctx_feat=glbctx_feat)

    def _aug_mask_preds(self, x, rois, extra):
        """The one mask head's logits, with the last stage's relayed feature (mmdet's)."""
        relayed = self._bbox_forward(-1, x, rois, **extra)['relayed_feat']
        return [self._mask_forward(x, rois, relayed_feat=relayed, **extra)['mask_pred']]

    def _last_mask_head(self):
        return self.mask_head
