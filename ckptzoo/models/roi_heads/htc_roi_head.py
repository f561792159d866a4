"""mmdet 2.x ``HybridTaskCascadeRoIHead`` (HTC, Chen et al. 2019): a :class:`CascadeRoIHead`
whose box and mask branches interleave, whose mask heads pass their features on (the mask
information flow), and that may fuse a semantic segmentation branch into both.

Training, as mmdet 2.28.2: with a ``semantic_head``, its loss ``loss_semantic_seg`` on
``gt_semantic_seg`` and its embedding ``semantic_feat``, pooled by ``semantic_roi_extractor``
and added to the box / mask RoI features (``semantic_fusion``). Per stage ``i``: sample, box
losses; with masks and ``interleaved``, the sampled RoIs regressed by their targets' classes
are sampled again for the mask branch (and are the next stage's proposals); the mask branch of
stage ``i`` runs the mask heads ``0..i-1`` for their features first (``mask_info_flow``).
Without ``interleaved`` the stages refine as the cascade does. As mmdet, an interleaved head
without masks never refines its proposals, and the refinement uses the target labels (the
regression must be class-agnostic, as in every HTC config).

Test: the cascade's boxes (mean scores, last stage's regression), then every stage's mask head
on the detections' features of the last mask extractor, each taking the previous one's
feature; the sigmoids are averaged.

Checkpoint units: ``semantic`` (the semantic head), then per stage ``bbox.{i}`` (extractor,
semantic pooling, box head) and ``mask.{i}`` (extractor, semantic pooling, mask heads
``0..i``), in training order.

Fixes over mmdet, which leave its results otherwise equal: the mask probabilities are averaged
without the flip mmdet applied when the image meta said ``flip``; with ``mask_info_flow=False``
the test takes each HTC mask head's logits (mmdet split the head's ``[logits, feature]`` list
and failed); ``aug_test`` is not supported (an error, not the cascade's without semantics).
"""
from functools import partial

import numpy as np
import torch
import torch.nn.functional as F

from ...core.bbox import bbox2result, bbox2roi
from ...registry import MODELS
from ..checkpointing import CheckpointUnit, unit_step
from .cascade_roi_head import CascadeRoIHead
from .mask_heads import HTCMaskHead

__all__ = ['HybridTaskCascadeRoIHead']

FUSIONS = ('bbox', 'mask')


@MODELS.register_module()
class HybridTaskCascadeRoIHead(CascadeRoIHead):
    """Args (mmdet 2.x's), besides :class:`CascadeRoIHead`'s:
        semantic_roi_extractor (dict | None): pools ``semantic_feat`` (a single-level
            extractor, ``featmap_strides`` the fusion level's).
        semantic_head (dict | None): a ``FusedSemanticHead``; None for no semantic branch.
        semantic_fusion (tuple): where the semantic feature is added, of ``('bbox', 'mask')``.
        interleaved (bool): the mask branch trains on the box branch's regressed RoIs.
        mask_info_flow (bool): each mask head takes the previous stages' features
            (``HTCMaskHead`` with ``with_conv_res`` from the second stage).
    """

    def __init__(self, num_stages, stage_loss_weights, semantic_roi_extractor=None,
                 semantic_head=None, semantic_fusion=('bbox', 'mask'), interleaved=True,
                 mask_info_flow=True, **kwargs):
        super().__init__(num_stages, stage_loss_weights, **kwargs)
        owner = type(self).__name__
        if not (isinstance(semantic_fusion, (tuple, list))
                and set(semantic_fusion) <= set(FUSIONS)):
            raise ValueError(f'{owner} semantic_fusion must be a tuple of {FUSIONS}, got '
                             f'{semantic_fusion!r}')
        if semantic_head is not None:
            if semantic_roi_extractor is None:
                raise ValueError(f'{owner} semantic_head needs a semantic_roi_extractor')
            self.semantic_roi_extractor = MODELS.build(semantic_roi_extractor)
            self.semantic_head = MODELS.build(semantic_head)
        self.semantic_fusion = semantic_fusion
        self.interleaved = interleaved
        self.mask_info_flow = mask_info_flow
        if self.with_mask and mask_info_flow:
            for i, head in enumerate(self.mask_head):
                if not isinstance(head, HTCMaskHead):
                    raise TypeError(f'{owner} mask_info_flow=True needs HTCMaskHead mask heads,'
                                    f' stage {i} has {type(head).__name__}')
                if i > 0 and not head.with_conv_res:
                    raise ValueError(f'{owner} mask_info_flow=True: the mask head of stage {i}'
                                     ' needs with_conv_res=True (it takes the previous feature)')
        self.semantic_unit = CheckpointUnit.from_flag(kwargs.get('with_cp', False),
                                                      kwargs.get('cp_use_reentrant', False))

    @property
    def with_semantic(self):
        return getattr(self, 'semantic_head', None) is not None

    def init_weights(self):
        super().init_weights()
        if self.with_semantic:
            self.semantic_head.init_weights()

    def _fuses(self, branch):
        return self.with_semantic and branch in self.semantic_fusion

    # ----------------------------------------------------------------------- checkpoint units
    def _bbox_modules(self, stage):
        return super()._bbox_modules(stage) + (
            [self.semantic_roi_extractor] if self._fuses('bbox') else [])

    def _mask_modules(self, stage):
        heads = list(self.mask_head[:stage + 1]) if self.mask_info_flow \
            else [self.mask_head[stage]]
        return [self.mask_roi_extractor[stage]] + heads + (
            [self.semantic_roi_extractor] if self._fuses('mask') else [])

    def _checkpoint_steps(self):
        """``semantic`` (with a semantic head), then the cascade's ``bbox.{i}``, ``mask.{i}``."""
        steps = super()._checkpoint_steps()
        if self.with_semantic:
            steps.insert(0, [unit_step('semantic', self.semantic_unit,
                                       self._semantic_forward_unit, self.semantic_head)])
        return steps

    def _semantic_forward_unit(self, *feats):
        return self.semantic_head(feats)

    def _semantic_forward(self, x):
        """``(semantic_pred, semantic_feat)`` through the ``semantic`` unit."""
        return self.semantic_unit(self._semantic_forward_unit, *x, module=self.semantic_head)

    def _fused(self, roi_feats, rois, semantic_feat):
        """The RoI features plus the semantic feature pooled on the same RoIs (average-pooled
        to their size when it differs)."""
        sem = self.semantic_roi_extractor([semantic_feat], rois)
        if sem.shape[-2:] != roi_feats.shape[-2:]:
            sem = F.adaptive_avg_pool2d(sem, roi_feats.shape[-2:])
        return roi_feats + sem

    def _bbox_forward_unit(self, stage, rois, *feats):
        """``feats``: the extractor's levels, then the semantic feature when fused."""
        n = self.bbox_roi_extractor[stage].num_inputs
        bbox_feats = self.bbox_roi_extractor[stage](list(feats[:n]), rois)
        if len(feats) > n:
            bbox_feats = self._fused(bbox_feats, rois, feats[n])
        return self.bbox_head[stage](bbox_feats)

    def _mask_feats(self, stage, rois, feats):
        n = self.mask_roi_extractor[stage].num_inputs
        mask_feats = self.mask_roi_extractor[stage](list(feats[:n]), rois)
        if len(feats) > n:
            mask_feats = self._fused(mask_feats, rois, feats[n])
        return mask_feats

    @staticmethod
    def _logits(head, mask_feats):
        return head(mask_feats, return_feat=False) if isinstance(head, HTCMaskHead) \
            else head(mask_feats)

    def _mask_forward_unit(self, stage, rois, *feats):
        """Stage ``stage``'s mask logits; with the information flow the earlier heads run
        first, each for its feature only (as mmdet trains)."""
        mask_feats = self._mask_feats(stage, rois, feats)
        if not self.mask_info_flow:
            return self._logits(self.mask_head[stage], mask_feats)
        last_feat = None
        for i in range(stage):
            last_feat = self.mask_head[i](mask_feats, last_feat, return_logits=False)
        return self.mask_head[stage](mask_feats, last_feat, return_feat=False)

    def _inputs(self, x, extractor, semantic_feat, branch):
        feats = tuple(x[:extractor.num_inputs])
        return feats + ((semantic_feat, ) if self._fuses(branch) else ())

    def _bbox_forward(self, stage, x, rois, semantic_feat=None):
        """Stage ``stage``'s box head outputs for ``rois``, through its ``bbox`` unit."""
        args = self._inputs(x, self.bbox_roi_extractor[stage], semantic_feat, 'bbox')
        cls_score, bbox_pred = self.bbox_units[stage](
            partial(self._bbox_forward_unit, stage), rois, *args,
            module=self._bbox_modules(stage))
        return dict(cls_score=cls_score, bbox_pred=bbox_pred)

    def _mask_forward(self, stage, x, rois, semantic_feat=None):
        """Stage ``stage``'s mask logits for ``rois``, through its ``mask`` unit."""
        args = self._inputs(x, self.mask_roi_extractor[stage], semantic_feat, 'mask')
        mask_pred = self.mask_units[stage](partial(self._mask_forward_unit, stage), rois,
                                           *args, module=self._mask_modules(stage))
        return dict(mask_pred=mask_pred)

    def _mask_stages(self, x, rois, semantic_feat):
        """Test: every stage's mask logits on the last mask extractor's features."""
        last = self.num_stages - 1
        mask_feats = self._mask_feats(
            last, rois, self._inputs(x, self.mask_roi_extractor[last], semantic_feat, 'mask'))
        preds, last_feat = [], None
        for head in self.mask_head:
            if self.mask_info_flow:
                mask_pred, last_feat = head(mask_feats, last_feat)
            else:
                mask_pred = self._logits(head, mask_feats)
            preds.append(mask_pred)
        return preds

    # ------------------------------------------------------------------------------ forward
    def forward_dummy(self, x, proposals):
        """Every stage's cls_score and bbox_pred on ``proposals``, then every stage's mask
        logits of the first 100 (FLOP counting, as mmdet)."""
        semantic_feat = self._semantic_forward(x)[1] if self.with_semantic else None
        rois = bbox2roi([proposals])
        outs = ()
        for i in range(self.num_stages):
            res = self._bbox_forward(i, x, rois, semantic_feat=semantic_feat)
            outs = outs + (res['cls_score'], res['bbox_pred'])
        if self.with_mask:
            outs = outs + tuple(self._mask_stages(x, rois[:100], semantic_feat))
        return outs

    def _bbox_forward_train(self, stage, x, sampling_results, gt_bboxes, gt_labels,
                            rcnn_train_cfg, semantic_feat=None):
        rois = bbox2roi([res.bboxes for res in sampling_results])
        bbox_results = self._bbox_forward(stage, x, rois, semantic_feat=semantic_feat)
        head = self.bbox_head[stage]
        bbox_targets = head.get_targets(sampling_results, gt_bboxes, gt_labels, rcnn_train_cfg)
        loss_bbox = head.loss(bbox_results['cls_score'], bbox_results['bbox_pred'], rois,
                              *bbox_targets)
        bbox_results.update(loss_bbox=loss_bbox, rois=rois, bbox_targets=bbox_targets)
        return bbox_results

    def _mask_forward_train(self, stage, x, sampling_results, gt_masks, rcnn_train_cfg,
                            semantic_feat=None):
        pos_rois = bbox2roi([res.pos_bboxes for res in sampling_results])
        mask_pred = self._mask_forward(stage, x, pos_rois, semantic_feat)['mask_pred']
        head = self.mask_head[stage]
        mask_targets = head.get_targets(sampling_results, gt_masks, rcnn_train_cfg)
        pos_labels = torch.cat([res.pos_gt_labels for res in sampling_results])
        return dict(loss_mask=head.loss(mask_pred, mask_targets, pos_labels))

    def forward_train(self, x, img_metas, proposal_list, gt_bboxes, gt_labels,
                      gt_bboxes_ignore=None, gt_masks=None, gt_semantic_seg=None, **kwargs):
        """``loss_semantic_seg`` (with a semantic head), then per stage ``s{i}.loss_cls``,
        ``s{i}.acc``, ``s{i}.loss_bbox``, ``s{i}.loss_mask``, times ``stage_loss_weights[i]``
        (``acc`` not)."""
        owner = type(self).__name__
        if not self.train_cfg:
            raise ValueError(f'{owner}.forward_train needs train_cfg (one dict per stage), '
                             f'got {self.train_cfg!r}')
        num_imgs = len(img_metas)
        if not (len(proposal_list) == len(gt_bboxes) == len(gt_labels) == num_imgs):
            raise ValueError(f'proposal_list, gt_bboxes and gt_labels need one entry per image '
                             f'({num_imgs}), got {len(proposal_list)}, {len(gt_bboxes)}, '
                             f'{len(gt_labels)}')
        if self.with_mask and gt_masks is None:
            raise ValueError(f'{owner} with a mask head needs gt_masks to train')
        if gt_bboxes_ignore is None:
            gt_bboxes_ignore = [None] * num_imgs
        losses = dict()
        semantic_feat = None
        if self.with_semantic:
            if gt_semantic_seg is None:
                raise ValueError(f"{owner} with a semantic_head needs gt_semantic_seg to train "
                                 "(LoadAnnotations(with_seg=True), SegRescale and Collect "
                                 "keys=[..., 'gt_semantic_seg'])")
            semantic_pred, semantic_feat = self._semantic_forward(x)
            losses['loss_semantic_seg'] = self.semantic_head.loss(semantic_pred,
                                                                  gt_semantic_seg)
        sample = partial(self._sample, x=x, img_metas=img_metas, gt_bboxes=gt_bboxes,
                         gt_labels=gt_labels, gt_bboxes_ignore=gt_bboxes_ignore)
        for i in range(self.num_stages):
            self.current_stage = i
            rcnn_train_cfg = self.train_cfg[i]
            lw = self.stage_loss_weights[i]
            sampling_results = sample(i, proposal_list=proposal_list)
            bbox_results = self._bbox_forward_train(i, x, sampling_results, gt_bboxes,
                                                    gt_labels, rcnn_train_cfg, semantic_feat)
            roi_labels = bbox_results['bbox_targets'][0]
            for name, value in bbox_results['loss_bbox'].items():
                losses[f's{i}.{name}'] = value * lw if 'loss' in name else value
            if self.with_mask:
                if self.interleaved:  # the mask branch trains on the regressed RoIs
                    pos_is_gts = [res.pos_is_gt for res in sampling_results]
                    with torch.no_grad():
                        proposal_list = self.bbox_head[i].refine_bboxes(
                            bbox_results['rois'], roi_labels, bbox_results['bbox_pred'],
                            pos_is_gts, img_metas)
                        sampling_results = sample(i, proposal_list=proposal_list)
                mask_results = self._mask_forward_train(i, x, sampling_results, gt_masks,
                                                        rcnn_train_cfg, semantic_feat)
                for name, value in mask_results['loss_mask'].items():
                    losses[f's{i}.{name}'] = value * lw if 'loss' in name else value
            if i < self.num_stages - 1 and not self.interleaved:
                pos_is_gts = [res.pos_is_gt for res in sampling_results]
                with torch.no_grad():
                    proposal_list = self.bbox_head[i].refine_bboxes(
                        bbox_results['rois'], roi_labels, bbox_results['bbox_pred'],
                        pos_is_gts, img_metas)
        return losses

    # --------------------------------------------------------------------------------- test
    def simple_test(self, x, proposal_list, img_metas, proposals=None, rescale=False):
        """Per image the per-class ``[k, 5]`` arrays, or with masks ``(bbox_results,
        segm_results)`` (mmdet's ``ms_bbox_result['ensemble']``)."""
        rois, empty = self._test_rois(proposal_list, proposals)
        if empty is not None:
            return empty
        num_imgs = len(proposal_list)
        num_classes = self.bbox_head[-1].num_classes
        semantic_feat = self._semantic_forward(x)[1] if self.with_semantic else None
        num_per_img = tuple(len(p) for p in proposal_list)
        rois, cls_score, bbox_pred = self._refined_stages(x, rois, img_metas, num_per_img,
                                                          semantic_feat=semantic_feat)
        det_bboxes, det_labels = [], []
        for i, meta in enumerate(img_metas):
            if rois[i].shape[0] == 0:
                det_bbox = rois[i].new_zeros(0, 5)
                det_label = rois[i].new_zeros((0, ), dtype=torch.long)
            else:
                det_bbox, det_label = self.bbox_head[-1].get_bboxes(
                    rois[i], cls_score[i], bbox_pred[i], meta['img_shape'],
                    meta['scale_factor'], rescale=rescale, cfg=self.test_cfg)
            det_bboxes.append(det_bbox)
            det_labels.append(det_label)
        bbox_results = [bbox2result(det_bboxes[i], det_labels[i], num_classes)
                        for i in range(num_imgs)]
        if not self.with_mask:
            return bbox_results
        segm_results = self._simple_test_mask(x, img_metas, det_bboxes, det_labels, rescale,
                                              semantic_feat)
        return list(zip(bbox_results, segm_results))

    def _simple_test_mask(self, x, img_metas, det_bboxes, det_labels, rescale, semantic_feat):
        num_classes = self.mask_head[-1].num_classes
        if all(det_bbox.shape[0] == 0 for det_bbox in det_bboxes):
            return [[[] for _ in range(num_classes)] for _ in det_bboxes]
        scale_factors = [meta['scale_factor'] for meta in img_metas]
        if rescale and not isinstance(scale_factors[0], float):
            scale_factors = [torch.as_tensor(np.asarray(s)).to(det_bboxes[0].device)
                             for s in scale_factors]
        _bboxes = [det_bboxes[i][:, :4] * scale_factors[i] if rescale else det_bboxes[i][:, :4]
                   for i in range(len(det_bboxes))]
        num_per_img = tuple(b.size(0) for b in _bboxes)
        aug_masks = [[m.sigmoid().cpu().numpy() for m in pred.split(num_per_img, 0)]
                     for pred in self._mask_stages(x, bbox2roi(_bboxes), semantic_feat)]
        segm_results = []
        for i, meta in enumerate(img_metas):
            if det_bboxes[i].shape[0] == 0:
                segm_results.append([[] for _ in range(num_classes)])
                continue
            merged = np.mean([masks[i] for masks in aug_masks], axis=0)
            segm_results.append(self.mask_head[-1].get_seg_masks(
                merged, _bboxes[i], det_labels[i], self.test_cfg, meta['ori_shape'],
                scale_factors[i], rescale))
        return segm_results

    def simple_test_mask(self, *args, **kwargs):
        raise NotImplementedError(f'{type(self).__name__} tests its masks in simple_test '
                                  '(with the semantic feature and the mask information flow)')

    def _aug_test_feats(self, x):
        return dict(semantic_feat=self._semantic_forward(x)[1]) if self.with_semantic else {}

    def _aug_mask_preds(self, x, rois, extra):
        """Every stage's mask logits on the last extractor's features (with the semantic
        feature and the mask information flow), as ``simple_test`` computes them."""
        return self._mask_stages(x, rois, extra.get('semantic_feat'))
