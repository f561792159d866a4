"""mmdet 2.x ``StandardRoIHead``: the second stage of Faster / Mask R-CNN.

Training: per image, proposals are assigned to ground truths and sampled; the sampled RoIs'
features go through the box head (``loss_cls``, ``acc``, ``loss_bbox``) and the positives'
through the mask head (``loss_mask``). Test: the box head scores and refines every proposal,
class-wise NMS keeps the detections, and the mask head segments them.

Checkpoint units (:mod:`ckptzoo.models.checkpointing`): ``bbox``, the RoI feature extraction
and the box head over all RoIs (mmdet's ``_bbox_forward``), and ``mask`` (with a mask head),
the mask RoI extraction (or the positives' box features, when the extractor is shared) and the
whole mask head (mmdet's ``_mask_forward``). With a ``shared_head`` (C4 models' ResLayer) its
blocks are units too, one chain ``shared_head.layer4.{j}`` run after the RoI extraction, and
``bbox`` / ``mask`` then cover the box / mask head only. The proposals come detached from the
RPN, so the sampling keeps nothing for backward.
"""
import warnings

import numpy as np
import torch
import torch.nn as nn

from ...core.bbox import bbox2result, bbox2roi, bbox_mapping
from ...core.post_processing import aug_flip, merge_aug_bboxes, merge_aug_masks, multiclass_nms
from ...registry import MODELS, TASK_UTILS, check_keys
from ...utils.cfg_get import cfg_get
from ..checkpointing import CheckpointOwnerMixin, CheckpointUnit, unit_step
from ..utils import apply_init_cfg
from ..utils.pretrained import load_pretrained

__all__ = ['StandardRoIHead']


@MODELS.register_module()
class StandardRoIHead(CheckpointOwnerMixin, nn.Module):
    """Args (mmdet 2.x's):
        bbox_roi_extractor, bbox_head (dict): the box branch (required).
        mask_roi_extractor (dict | None): None with a ``mask_head`` shares the box extractor
            (``share_roi_extractor``): the mask head then takes the positives' box features.
        mask_head (dict | None): the mask branch (``FCNMaskHead``).
        shared_head (dict | None): a head run on the RoI features before the box and mask
            heads (C4 models: ``dict(type='ResLayer', ...)``).
        train_cfg (dict): rcnn ``assigner``, ``sampler``, ``mask_size``, ``pos_weight``,
            ``debug`` (accepted, unused as in mmdet).
        test_cfg (dict): rcnn ``score_thr``, ``nms``, ``max_per_img``, ``mask_thr_binary``.
        pretrained (str | None): handed to ``shared_head`` as its ``pretrained`` (the
            detector passes its own here, as mmdet); without a shared head it is unused.
        init_cfg (dict | None): applied at construction; ``Pretrained`` in ``init_weights``.
        with_cp (bool): ``'full'`` checkpointing of the ``bbox`` and ``mask`` units (not an
            mmdet argument; default False). ``set_checkpoint_plan`` changes modes later.
        cp_use_reentrant (bool): torch's reentrant checkpoint instead of the non-reentrant one.
    """

    TRAIN_CFG_KEYS = ('assigner', 'sampler', 'mask_size', 'pos_weight', 'debug')
    TEST_CFG_KEYS = ('score_thr', 'nms', 'max_per_img', 'mask_thr_binary')

    def __init__(self, bbox_roi_extractor=None, bbox_head=None, mask_roi_extractor=None,
                 mask_head=None, shared_head=None, train_cfg=None, test_cfg=None,
                 pretrained=None, init_cfg=None, with_cp=False, cp_use_reentrant=False):
        super().__init__()
        if bbox_head is None or bbox_roi_extractor is None:
            raise ValueError('StandardRoIHead needs bbox_roi_extractor and bbox_head configs')
        if not isinstance(with_cp, bool):
            raise TypeError(f'StandardRoIHead with_cp must be a bool, got {with_cp!r}')
        for name, cfg, keys in (('train_cfg', train_cfg, self.TRAIN_CFG_KEYS),
                                ('test_cfg', test_cfg, self.TEST_CFG_KEYS)):
            if isinstance(cfg, dict):
                check_keys(cfg, keys, name, owner=type(self).__name__)
        self.train_cfg = train_cfg
        self.test_cfg = test_cfg
        self.pretrained = pretrained
        if shared_head is not None:  # built first, as mmdet
            self.shared_head = MODELS.build(dict(shared_head, pretrained=pretrained))
        self.init_bbox_head(bbox_roi_extractor, bbox_head)
        if mask_head is not None:
            self.init_mask_head(mask_roi_extractor, mask_head)
        self.init_assigner_sampler()
        self.bbox_unit = CheckpointUnit.from_flag(with_cp, cp_use_reentrant)
        self.mask_unit = CheckpointUnit.from_flag(with_cp, cp_use_reentrant)
        self.init_cfg = init_cfg
        apply_init_cfg(self, init_cfg)

    @property
    def with_bbox(self):
        return getattr(self, 'bbox_head', None) is not None

    @property
    def with_mask(self):
        return getattr(self, 'mask_head', None) is not None

    @property
    def with_shared_head(self):
        return getattr(self, 'shared_head', None) is not None

    def init_bbox_head(self, bbox_roi_extractor, bbox_head):
        self.bbox_roi_extractor = MODELS.build(bbox_roi_extractor)
        self.bbox_head = MODELS.build(bbox_head)

    def init_mask_head(self, mask_roi_extractor, mask_head):
        if mask_roi_extractor is not None:
            self.mask_roi_extractor = MODELS.build(mask_roi_extractor)
            self.share_roi_extractor = False
        else:
            self.share_roi_extractor = True
            self.mask_roi_extractor = self.bbox_roi_extractor
        self.mask_head = MODELS.build(mask_head)

    def init_assigner_sampler(self):
        self.bbox_assigner = None
        self.bbox_sampler = None
        if self.train_cfg:
            for key in ('assigner', 'sampler'):
                if cfg_get(self.train_cfg, key) is None:
                    raise ValueError(f'StandardRoIHead train_cfg needs {key!r}, got '
                                     f'{self.train_cfg!r}')
            self.bbox_assigner = TASK_UTILS.build(cfg_get(self.train_cfg, 'assigner'))
            # mmdet's context protocol: a sampler may run this head (OHEMSampler)
            self.bbox_sampler = TASK_UTILS.build(cfg_get(self.train_cfg, 'sampler'),
                                                 default_args=dict(context=self))

    def init_weights(self):
        """Load a ``Pretrained`` init_cfg, then let the children load theirs."""
        if isinstance(self.init_cfg, dict) and self.init_cfg.get('type') == 'Pretrained':
            load_pretrained(self, self.init_cfg, type(self).__name__)
        for m in self.children():
            if hasattr(m, 'init_weights'):
                m.init_weights()

    # ----------------------------------------------------------------------- checkpoint units
    def _bbox_modules(self):
        return [self.bbox_head] if self.with_shared_head \
            else [self.bbox_roi_extractor, self.bbox_head]

    def _mask_modules(self):
        return [self.mask_head] if self.share_roi_extractor or self.with_shared_head \
            else [self.mask_roi_extractor, self.mask_head]

    def _shared_steps(self):
        return self.shared_head.chain_steps('shared_head.')

    def _shared_forward(self, roi_feats):
        """The shared head over RoI features, through its block units (and segments)."""
        return self._run_chain(self._shared_steps(), roi_feats)[0]

    def _checkpoint_steps(self):
        """``bbox``, then ``mask`` (with a mask head): each a chain of one step; with a
        shared head, first its blocks as one chain."""
        if self.with_shared_head:
            steps = [self._shared_steps(), [unit_step('bbox', self.bbox_unit, self.bbox_head)]]
            if self.with_mask:
                steps.append([unit_step('mask', self.mask_unit, self.mask_head)])
            return steps
        steps = [[unit_step('bbox', self.bbox_unit, self._bbox_forward_unit,
                            self._bbox_modules())]]
        if self.with_mask:
            steps.append([unit_step('mask', self.mask_unit, self._mask_forward_unit,
                                    self._mask_modules())])
        return steps

    def _bbox_forward_unit(self, rois, *feats):
        bbox_feats = self.bbox_roi_extractor(list(feats), rois)
        cls_score, bbox_pred = self.bbox_head(bbox_feats)
        return cls_score, bbox_pred, bbox_feats

    def _mask_forward_unit(self, rois, *feats):
        mask_feats = self.mask_roi_extractor(list(feats), rois)
        return self.mask_head(mask_feats), mask_feats

    def _mask_forward_shared(self, pos_inds, bbox_feats):
        mask_feats = bbox_feats[pos_inds]
        return self.mask_head(mask_feats), mask_feats

    # ------------------------------------------------------------------------------ forward
    def forward_dummy(self, x, proposals):
        """The raw outputs for ``proposals`` of one image (FLOP counting): cls_score,
        bbox_pred and, with a mask head, the mask logits of the first 100 RoIs."""
        rois = bbox2roi([proposals])
        bbox_results = self._bbox_forward(x, rois)
        outs = (bbox_results['cls_score'], bbox_results['bbox_pred'])
        if self.with_mask:
            outs = outs + (self._mask_forward(x, rois[:100])['mask_pred'], )
        return outs

    def forward_train(self, x, img_metas, proposal_list, gt_bboxes, gt_labels,
                      gt_bboxes_ignore=None, gt_masks=None, **kwargs):
        """Losses ``loss_cls``, ``acc``, ``loss_bbox`` (and ``loss_mask``) of the RoIs
        sampled from each image's proposals (``[n, 5]`` with scores, or ``[n, 4]``).
        ``kwargs`` (other annotations the pipeline collects) are unused, as in mmdet."""
        if not self.train_cfg:
            raise ValueError('StandardRoIHead.forward_train needs train_cfg (assigner, sampler, '
                             f'...), got {self.train_cfg!r}')
        num_imgs = len(img_metas)
        if not (len(proposal_list) == len(gt_bboxes) == len(gt_labels) == num_imgs):
            raise ValueError(f'proposal_list, gt_bboxes and gt_labels need one entry per image '
                             f'({num_imgs}), got {len(proposal_list)}, {len(gt_bboxes)}, '
                             f'{len(gt_labels)}')
        if self.with_mask and gt_masks is None:
            raise ValueError('StandardRoIHead with a mask head needs gt_masks to train')
        if gt_bboxes_ignore is None:
            gt_bboxes_ignore = [None] * num_imgs
        sampling_results = []
        for i in range(num_imgs):
            assign_result = self.bbox_assigner.assign(proposal_list[i], gt_bboxes[i],
                                                      gt_bboxes_ignore[i], gt_labels[i])
            sampling_results.append(self.bbox_sampler.sample(
                assign_result, proposal_list[i], gt_bboxes[i], gt_labels[i],
                feats=[lvl_feat[i][None] for lvl_feat in x]))
        losses = dict()
        bbox_results = self._bbox_forward_train(x, sampling_results, gt_bboxes, gt_labels,
                                                img_metas)
        losses.update(bbox_results['loss_bbox'])
        if self.with_mask:
            mask_results = self._mask_forward_train(x, sampling_results,
                                                    bbox_results['bbox_feats'], gt_masks,
                                                    img_metas)
            losses.update(mask_results['loss_mask'])
        return losses

    def _bbox_forward(self, x, rois):
        """Box head outputs for ``rois``, through the ``bbox`` unit."""
        feats = tuple(x[:self.bbox_roi_extractor.num_inputs])
        if self.with_shared_head:
            bbox_feats = self._shared_forward(self.bbox_roi_extractor(list(feats), rois))
            cls_score, bbox_pred = self.bbox_unit(self.bbox_head, bbox_feats,
                                                  module=self.bbox_head)
            return dict(cls_score=cls_score, bbox_pred=bbox_pred, bbox_feats=bbox_feats)
        cls_score, bbox_pred, bbox_feats = self.bbox_unit(
            self._bbox_forward_unit, rois, *feats, module=self._bbox_modules())
        return dict(cls_score=cls_score, bbox_pred=bbox_pred, bbox_feats=bbox_feats)

    def _bbox_forward_train(self, x, sampling_results, gt_bboxes, gt_labels, img_metas):
        rois = bbox2roi([res.bboxes for res in sampling_results])
        bbox_results = self._bbox_forward(x, rois)
        bbox_targets = self.bbox_head.get_targets(sampling_results, gt_bboxes, gt_labels,
                                                  self.train_cfg)
        loss_bbox = self.bbox_head.loss(bbox_results['cls_score'], bbox_results['bbox_pred'],
                                        rois, *bbox_targets)
        bbox_results.update(loss_bbox=loss_bbox)
        return bbox_results

    def _mask_forward(self, x, rois=None, pos_inds=None, bbox_feats=None):
        """Mask logits of ``rois``, or (shared extractor) of the rows ``pos_inds`` (bool) of
        ``bbox_feats``, through the ``mask`` unit."""
        if (rois is not None) == (pos_inds is not None and bbox_feats is not None):
            raise ValueError('_mask_forward takes rois, or pos_inds and bbox_feats')
        if rois is not None and self.with_shared_head:
            feats = list(x[:self.mask_roi_extractor.num_inputs])
            mask_feats = self._shared_forward(self.mask_roi_extractor(feats, rois))
            mask_pred = self.mask_unit(self.mask_head, mask_feats, module=self.mask_head)
        elif rois is not None:
            feats = tuple(x[:self.mask_roi_extractor.num_inputs])
            mask_pred, mask_feats = self.mask_unit(self._mask_forward_unit, rois, *feats,
                                                   module=self._mask_modules())
        else:
            mask_pred, mask_feats = self.mask_unit(self._mask_forward_shared, pos_inds,
                                                   bbox_feats, module=self._mask_modules())
        return dict(mask_pred=mask_pred, mask_feats=mask_feats)

    def _mask_forward_train(self, x, sampling_results, bbox_feats, gt_masks, img_metas):
        if not self.share_roi_extractor:
            pos_rois = bbox2roi([res.pos_bboxes for res in sampling_results])
            mask_results = self._mask_forward(x, pos_rois)
        else:
            pos_inds = torch.cat([torch.cat([
                torch.ones(res.pos_bboxes.shape[0], device=bbox_feats.device, dtype=torch.bool),
                torch.zeros(res.neg_bboxes.shape[0], device=bbox_feats.device,
                            dtype=torch.bool)]) for res in sampling_results])
            mask_results = self._mask_forward(x, pos_inds=pos_inds, bbox_feats=bbox_feats)
        mask_targets = self.mask_head.get_targets(sampling_results, gt_masks, self.train_cfg)
        pos_labels = torch.cat([res.pos_gt_labels for res in sampling_results])
        loss_mask = self.mask_head.loss(mask_results['mask_pred'], mask_targets, pos_labels)
        mask_results.update(loss_mask=loss_mask, mask_targets=mask_targets)
        return mask_results

    # --------------------------------------------------------------------------------- test
    def simple_test(self, x, proposal_list, img_metas, proposals=None, rescale=False):
        """Per image, the per-class ``[k, 5]`` arrays (mmdet's ``bbox2result``), or with a
        mask head ``(bbox_results, segm_results)``. ``proposals`` is unused in mmdet (the
        detector passes given proposals as ``proposal_list``) and must stay None."""
        if proposals is not None:
            raise ValueError('StandardRoIHead.simple_test takes the proposals as proposal_list;'
                             ' proposals= must be None')
        if not self.test_cfg:
            raise ValueError('StandardRoIHead.simple_test needs test_cfg (score_thr, nms, '
                             f'max_per_img), got {self.test_cfg!r}')
        det_bboxes, det_labels = self.simple_test_bboxes(x, img_metas, proposal_list,
                                                         self.test_cfg, rescale=rescale)
        bbox_results = [bbox2result(det_bboxes[i], det_labels[i], self.bbox_head.num_classes)
                        for i in range(len(det_bboxes))]
        if not self.with_mask:
            return bbox_results
        segm_results = self.simple_test_mask(x, img_metas, det_bboxes, det_labels,
                                             rescale=rescale)
        return list(zip(bbox_results, segm_results))

    def aug_test(self, x, proposal_list, img_metas, rescale=False):
        """mmdet 2.x test-time augmentation of one image: ``x`` and ``img_metas`` are lists
        over augmentations (each level's features; a one-dict meta list), ``proposal_list``
        the image's merged proposals in the original image (``rpn_head.aug_test_rpn``).

        Returns ``[bbox_results]`` or ``[(bbox_results, segm_results)]``: boxes in the
        original image with ``rescale``, else in the first augmentation's scale. mmdet pastes
        the masks into the original image either way, against its own docstring and its
        boxes; here without ``rescale`` they are pasted in the first augmentation's scale, as
        the boxes (and as ``simple_test``).
        """
        if not self.test_cfg:
            raise ValueError('StandardRoIHead.aug_test needs test_cfg (score_thr, nms, '
                             f'max_per_img), got {self.test_cfg!r}')
        if len(x) != len(img_metas):
            raise ValueError(f'aug_test needs features and img_metas per augmentation, got '
                             f'{len(x)} and {len(img_metas)}')
        if len(proposal_list) != 1:
            raise ValueError(f'aug_test takes the proposals of one image, got '
                             f'{len(proposal_list)}')
        det_bboxes, det_labels = self.aug_test_bboxes(x, img_metas, proposal_list,
                                                      self.test_cfg)
        _det_bboxes = det_bboxes
        if not rescale:
            _det_bboxes = det_bboxes.clone()
            _det_bboxes[:, :4] *= det_bboxes.new_tensor(img_metas[0][0]['scale_factor'])
        bbox_results = bbox2result(_det_bboxes, det_labels, self.bbox_head.num_classes)
        if not self.with_mask:
            return [bbox_results]
        segm_results = self.aug_test_mask(x, img_metas, det_bboxes, det_labels, rescale=rescale)
        return [(bbox_results, segm_results)]

    def aug_test_bboxes(self, feats, img_metas, proposal_list, rcnn_test_cfg):
        """``(det_bboxes [k, 5], det_labels [k])`` in the original image: the proposals
        mapped into each augmentation, scored and refined there, mapped back, averaged
        (``merge_aug_bboxes``), then class-wise NMS with ``rcnn_test_cfg``. ``proposal_list``:
        one set per batch entry of the features (one image; TridentNet's branches)."""
        if sum(p.shape[0] for p in proposal_list) == 0:
            return self._empty_dets(proposal_list[0].new_zeros(0, 5), rcnn_test_cfg)
        aug_bboxes, aug_scores = [], []
        for x, aug_metas in zip(feats, img_metas):
            flip, direction = aug_flip(aug_metas)
            meta = aug_metas[0]
            rois = bbox2roi([bbox_mapping(p[:, :4], meta['img_shape'], meta['scale_factor'],
                                          flip, direction or 'horizontal')
                             for p in proposal_list])  # RoI batch index: the list's position
            bbox_results = self._bbox_forward(x, rois)
            bboxes, scores = self.bbox_head.get_bboxes(
                rois, bbox_results['cls_score'], bbox_results['bbox_pred'], meta['img_shape'],
                meta['scale_factor'], rescale=False, cfg=None)
            aug_bboxes.append(bboxes)
            aug_scores.append(scores)
        bboxes, scores = merge_aug_bboxes(aug_bboxes, aug_scores, img_metas, rcnn_test_cfg)
        return multiclass_nms(bboxes, scores, cfg_get(rcnn_test_cfg, 'score_thr'),
                              cfg_get(rcnn_test_cfg, 'nms'), cfg_get(rcnn_test_cfg, 'max_per_img', -1))

    def aug_test_mask(self, feats, img_metas, det_bboxes, det_labels, rescale=True):
        """The masks of the detections ``det_bboxes`` (original image): each augmentation's
        mask probabilities of the boxes mapped into it, flipped back and averaged
        (``merge_aug_masks``), pasted into the original image (``rescale``, mmdet's only way)
        or into the first augmentation's scale."""
        if det_bboxes.shape[0] == 0:
            return [[] for _ in range(self.mask_head.num_classes)]
        aug_masks = []
        for x, aug_metas in zip(feats, img_metas):
            flip, direction = aug_flip(aug_metas)
            meta = aug_metas[0]
            rois = bbox2roi([bbox_mapping(det_bboxes[:, :4], meta['img_shape'],
                                          meta['scale_factor'], flip,
                                          direction or 'horizontal')])
            # probabilities on the CPU, as mmdet, to spare device memory across views
            aug_masks.append(self._mask_forward(x, rois)['mask_pred'].sigmoid().cpu().numpy())
        merged_masks = merge_aug_masks(aug_masks, img_metas, self.test_cfg)
        ori_shape = img_metas[0][0]['ori_shape']
        if rescale:
            bboxes, scale_factor = det_bboxes, det_bboxes.new_ones(4)
        else:
            scale_factor = det_bboxes.new_tensor(img_metas[0][0]['scale_factor']).expand(4)
            bboxes = det_bboxes[:, :4] * scale_factor
        return self.mask_head.get_seg_masks(merged_masks, bboxes, det_labels, self.test_cfg,
                                            ori_shape, scale_factor=scale_factor, rescale=False)

    def _empty_dets(self, rois, rcnn_test_cfg):
        det_bbox = rois.new_zeros(0, 5)
        det_label = rois.new_zeros((0, ), dtype=torch.long)
        if rcnn_test_cfg is None:
            det_bbox = det_bbox[:, :4]
            det_label = rois.new_zeros((0, self.bbox_head.fc_cls.out_features))
        return det_bbox, det_label

    def simple_test_bboxes(self, x, img_metas, proposals, rcnn_test_cfg, rescale=False):
        """Per image ``(det_bboxes [k, 5], det_labels [k])``; an image without proposals gets
        none. With ``rcnn_test_cfg=None`` the boxes and scores before NMS (as mmdet)."""
        rois = bbox2roi(proposals)
        if rois.shape[0] == 0:
            det_bbox, det_label = self._empty_dets(rois, rcnn_test_cfg)
            return [det_bbox] * len(proposals), [det_label] * len(proposals)
        bbox_results = self._bbox_forward(x, rois)
        num_per_img = tuple(len(p) for p in proposals)
        rois = rois.split(num_per_img, 0)
        cls_score = bbox_results['cls_score'].split(num_per_img, 0)
        bbox_pred = bbox_results['bbox_pred']
        if bbox_pred is None:
            bbox_pred = (None, ) * len(proposals)
        elif isinstance(bbox_pred, torch.Tensor):
            bbox_pred = bbox_pred.split(num_per_img, 0)
        else:  # a head's own prediction structure (SABL's bucket pair), split by the head
            bbox_pred = self.bbox_head.bbox_pred_split(bbox_pred, num_per_img)
        det_bboxes, det_labels = [], []
        for i, meta in enumerate(img_metas):
            if rois[i].shape[0] == 0:
                det_bbox, det_label = self._empty_dets(rois[i], rcnn_test_cfg)
            else:
                det_bbox, det_label = self.bbox_head.get_bboxes(
                    rois[i], cls_score[i], bbox_pred[i], meta['img_shape'],
                    meta['scale_factor'], rescale=rescale, cfg=rcnn_test_cfg)
            det_bboxes.append(det_bbox)
            det_labels.append(det_label)
        return det_bboxes, det_labels

    def simple_test_mask(self, x, img_metas, det_bboxes, det_labels, rescale=False):
        """Per image, the mask head's ``get_seg_masks`` of its detections (boxes mapped back
        to the network input when ``rescale``); an image without detections gets an empty
        list per class."""
        ori_shapes = tuple(meta['ori_shape'] for meta in img_metas)
        scale_factors = [meta['scale_factor'] for meta in img_metas]
        if isinstance(scale_factors[0], float):
            warnings.warn('scale_factor in img_metas should be an ndarray of 4 '
                          '(w, h, w, h) factors; a float is deprecated')
            scale_factors = [np.full(4, s, dtype=np.float32) for s in scale_factors]
        num_classes = self.mask_head.num_classes
        if all(det_bbox.shape[0] == 0 for det_bbox in det_bboxes):
            return [[[] for _ in range(num_classes)] for _ in det_bboxes]
        if rescale:
            scale_factors = [s.to(det_bboxes[0].device) if isinstance(s, torch.Tensor)
                             else torch.from_numpy(np.asarray(s)).to(det_bboxes[0].device)
                             for s in scale_factors]
        _bboxes = [det_bboxes[i][:, :4] * scale_factors[i] if rescale else det_bboxes[i][:, :4]
                   for i in range(len(det_bboxes))]
        mask_pred = self._mask_forward(x, bbox2roi(_bboxes))['mask_pred']
        mask_preds = mask_pred.split([len(d) for d in det_bboxes], 0)
        segm_results = []
        for i in range(len(det_bboxes)):
            if det_bboxes[i].shape[0] == 0:
                segm_results.append([[] for _ in range(num_classes)])
            else:
                segm_results.append(self.mask_head.get_seg_masks(
                    mask_preds[i], _bboxes[i], det_labels[i], self.test_cfg, ori_shapes[i],
                    scale_factors[i], rescale))
        return segm_results
