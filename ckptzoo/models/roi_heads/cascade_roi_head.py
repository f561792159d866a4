"""mmdet 2.x ``CascadeRoIHead`` (Cai & Vasconcelos 2018): ``num_stages`` box heads, each
trained on the boxes the previous one refined, with IoU thresholds rising stage by stage.

Training, per stage ``i``: assign and sample the current proposals with ``train_cfg[i]``,
box losses (and, with masks, the mask loss of the positives) as ``s{i}.loss_cls``,
``s{i}.acc``, ``s{i}.loss_bbox``, ``s{i}.loss_mask``, the losses times
``stage_loss_weights[i]``; then the sampled RoIs, regressed by their target class (the
predicted one for negatives) and without the ground truths the sampler added, are the next
stage's proposals. Test: the class scores are averaged over the stages, the boxes are the last
stage's regression of the RoIs the stages refined in turn, and the mask probabilities of every
stage's mask head are averaged.

Checkpoint units (:mod:`ckptzoo.models.checkpointing`): ``bbox.{i}``, stage ``i``'s RoI
extraction and box head, and ``mask.{i}`` (with masks), its mask RoI extraction and mask head,
listed in training order (``bbox.0``, ``mask.0``, ``bbox.1``, ...); the plan key ``bbox`` or
``mask`` names every stage's, as it names :class:`StandardRoIHead`'s one unit.

Fixes over mmdet, which leave its results otherwise equal: the mask probabilities of the
stages are averaged as they are in ``simple_test`` (mmdet flipped them within their boxes when
the image meta said ``flip``); ``aug_test`` without ``rescale`` gives boxes and masks in the
first augmentation's scale, as mmdet's docstring says (mmdet gave the original image's).
"""
import numbers
from functools import partial

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
from .standard_roi_head import StandardRoIHead

__all__ = ['CascadeRoIHead']


@MODELS.register_module()
class CascadeRoIHead(CheckpointOwnerMixin, nn.Module):
    """Args (mmdet 2.x's):
        num_stages (int): the cascade's stages.
        stage_loss_weights (list[float]): one weight per stage for its losses.
        bbox_roi_extractor, bbox_head (dict | list[dict]): one config for every stage, or a
            list of ``num_stages``.
        mask_roi_extractor (dict | list | None): None with a ``mask_head`` shares the box
            extractors (``share_roi_extractor``).
        mask_head (dict | list | None): the mask branch, per stage as the box heads.
        shared_head (None): not supported (nor by mmdet's cascade).
        train_cfg (list[dict] | None): the detector's ``train_cfg.rcnn``, one dict per stage
            (``assigner``, ``sampler``, ``mask_size``, ``pos_weight``, ``debug``).
        test_cfg (dict | None): ``score_thr``, ``nms``, ``max_per_img``, ``mask_thr_binary``.
        pretrained, init_cfg: as :class:`StandardRoIHead`.
        with_cp (bool): ``'full'`` on every unit (not an mmdet argument; default False).
        cp_use_reentrant (bool): torch's reentrant checkpoint instead of the non-reentrant one.
    """

    def __init__(self, num_stages, stage_loss_weights, bbox_roi_extractor=None, bbox_head=None,
                 mask_roi_extractor=None, mask_head=None, shared_head=None, train_cfg=None,
                 test_cfg=None, pretrained=None, init_cfg=None, with_cp=False,
                 cp_use_reentrant=False):
        super().__init__()
        owner = type(self).__name__
        if shared_head is not None:
            raise NotImplementedError(f'{owner} does not support shared_head (nor does '
                                      f"mmdet's cascade), got {shared_head!r}")
        if bbox_head is None or bbox_roi_extractor is None:
            raise ValueError(f'{owner} needs bbox_roi_extractor and bbox_head configs')
        if not (isinstance(num_stages, numbers.Integral) and not isinstance(num_stages, bool)
                and num_stages > 0):
            raise ValueError(f'{owner} num_stages must be a positive int, got {num_stages!r}')
        if not isinstance(with_cp, bool):
            raise TypeError(f'{owner} with_cp must be a bool, got {with_cp!r}')
        self.num_stages = int(num_stages)
        self.stage_loss_weights = self._per_stage(stage_loss_weights, 'stage_loss_weights',
                                                  expand=False)
        if train_cfg is not None:
            train_cfg = self._per_stage(train_cfg, 'train_cfg (the detector\'s '
                                        'train_cfg.rcnn)', expand=False)
            for i, cfg in enumerate(train_cfg):
                if not isinstance(cfg, dict):
                    raise TypeError(f'{owner} train_cfg[{i}] must be a dict, got {cfg!r}')
                check_keys(cfg, StandardRoIHead.TRAIN_CFG_KEYS, f'train_cfg.rcnn[{i}]', owner)
        if isinstance(test_cfg, dict):
            check_keys(test_cfg, StandardRoIHead.TEST_CFG_KEYS, 'test_cfg.rcnn', owner)
        self.train_cfg = train_cfg
        self.test_cfg = test_cfg
        self.pretrained = pretrained
        self.init_bbox_head(bbox_roi_extractor, bbox_head)
        if mask_head is not None:
            self.init_mask_head(mask_roi_extractor, mask_head)
        self.init_assigner_sampler()
        self.bbox_units = [CheckpointUnit.from_flag(with_cp, cp_use_reentrant)
                           for _ in range(self.num_stages)]
        self.mask_units = [CheckpointUnit.from_flag(with_cp, cp_use_reentrant)
                           for _ in range(self.num_stages)]
        self.init_cfg = init_cfg
        apply_init_cfg(self, init_cfg)

    def _per_stage(self, value, name, expand=True):
        """``value`` as a list of ``num_stages``: a list of that length, or (``expand``) one
        config for every stage."""
        if isinstance(value, (list, tuple)):
            if len(value) != self.num_stages:
                raise ValueError(f'{type(self).__name__} {name} needs one entry per stage '
                                 f'(num_stages={self.num_stages}), got {len(value)}: {value!r}')
            return list(value)
        if expand:
            return [value] * self.num_stages
        raise TypeError(f'{type(self).__name__} {name} must be a list of {self.num_stages} '
                        f'(one per stage), got {value!r}')

    @property
    def with_bbox(self):
        return getattr(self, 'bbox_head', None) is not None

    @property
    def with_mask(self):
        return getattr(self, 'mask_head', None) is not None

    @property
    def with_shared_head(self):
        return False

    def init_bbox_head(self, bbox_roi_extractor, bbox_head):
        extractors = self._per_stage(bbox_roi_extractor, 'bbox_roi_extractor')
        heads = self._per_stage(bbox_head, 'bbox_head')
        self.bbox_roi_extractor = nn.ModuleList(MODELS.build(c) for c in extractors)
        self.bbox_head = nn.ModuleList(MODELS.build(c) for c in heads)

    def init_mask_head(self, mask_roi_extractor, mask_head):
        self.mask_head = nn.ModuleList(MODELS.build(c)
                                       for c in self._per_stage(mask_head, 'mask_head'))
        if mask_roi_extractor is not None:
            self.share_roi_extractor = False
            self.mask_roi_extractor = nn.ModuleList(
                MODELS.build(c) for c in self._per_stage(mask_roi_extractor,
                                                         'mask_roi_extractor'))
        else:
            self.share_roi_extractor = True
            self.mask_roi_extractor = self.bbox_roi_extractor

    def init_assigner_sampler(self):
        """An assigner and a sampler per stage (the planner sets each at capacity:
        :func:`~ckptzoo.core.bbox.set_sampling_at_capacity` finds them in the list)."""
        self.bbox_assigner, self.bbox_sampler = [], []
        for i, cfg in enumerate(self.train_cfg or []):
            for key in ('assigner', 'sampler'):
                if cfg_get(cfg, key) is None:
                    raise ValueError(f'{type(self).__name__} train_cfg.rcnn[{i}] needs {key!r},'
                                     f' got {cfg!r}')
            self.bbox_assigner.append(TASK_UTILS.build(cfg_get(cfg, 'assigner')))
            self.current_stage = i  # mmdet's context protocol: the stage OHEM mines with
            self.bbox_sampler.append(TASK_UTILS.build(cfg_get(cfg, 'sampler'),
                                                      default_args=dict(context=self)))

    def init_weights(self):
        """Load a ``Pretrained`` init_cfg, then let the children load theirs."""
        if isinstance(self.init_cfg, dict) and self.init_cfg.get('type') == 'Pretrained':
            load_pretrained(self, self.init_cfg, type(self).__name__)
        parts = [*self.bbox_roi_extractor, *self.bbox_head]
        if self.with_mask:
            parts += [*self.mask_head] + ([] if self.share_roi_extractor
                                          else [*self.mask_roi_extractor])
        for m in parts:
            if hasattr(m, 'init_weights'):
                m.init_weights()

    # ----------------------------------------------------------------------- checkpoint units
    def _bbox_modules(self, stage):
        return [self.bbox_roi_extractor[stage], self.bbox_head[stage]]

    def _mask_modules(self, stage):
        return [self.mask_roi_extractor[stage], self.mask_head[stage]]

    def _checkpoint_steps(self):
        """Per stage ``bbox.{i}``, then ``mask.{i}``: each a chain of one step."""
        steps = []
        for i in range(self.num_stages):
            steps.append([unit_step(f'bbox.{i}', self.bbox_units[i],
                                    partial(self._bbox_forward_unit, i), self._bbox_modules(i))])
            if self.with_mask:
                steps.append([unit_step(f'mask.{i}', self.mask_units[i],
                                        partial(self._mask_forward_unit, i),
                                        self._mask_modules(i))])
        return steps

    def _bbox_forward_unit(self, stage, rois, *feats):
        bbox_feats = self.bbox_roi_extractor[stage](list(feats), rois)
        cls_score, bbox_pred = self.bbox_head[stage](bbox_feats)
        return cls_score, bbox_pred, bbox_feats

    def _mask_forward_unit(self, stage, rois, *feats):
        return self.mask_head[stage](self.mask_roi_extractor[stage](list(feats), rois))

    def _bbox_forward(self, stage, x, rois):
        """Stage ``stage``'s box head outputs for ``rois``, through its ``bbox`` unit."""
        feats = tuple(x[:self.bbox_roi_extractor[stage].num_inputs])
        cls_score, bbox_pred, bbox_feats = self.bbox_units[stage](
            partial(self._bbox_forward_unit, stage), rois, *feats,
            module=self._bbox_modules(stage))
        return dict(cls_score=cls_score, bbox_pred=bbox_pred, bbox_feats=bbox_feats)

    def _mask_forward(self, stage, x, rois):
        """Stage ``stage``'s mask logits for ``rois`` (features pooled again by its mask
        extractor, the box one when shared, as mmdet), through its ``mask`` unit."""
        feats = tuple(x[:self.mask_roi_extractor[stage].num_inputs])
        mask_pred = self.mask_units[stage](partial(self._mask_forward_unit, stage), rois,
                                           *feats, module=self._mask_modules(stage))
        return dict(mask_pred=mask_pred)

    # ------------------------------------------------------------------------------ forward
    def forward_dummy(self, x, proposals):
        """Every stage's cls_score and bbox_pred on ``proposals`` (not refined between the
        stages, as mmdet), then every stage's mask logits of the first 100 (FLOP counting)."""
        outs = ()
        rois = bbox2roi([proposals])
        for i in range(self.num_stages):
            bbox_results = self._bbox_forward(i, x, rois)
            outs = outs + (bbox_results['cls_score'], bbox_results['bbox_pred'])
        if self.with_mask:
            for i in range(self.num_stages):
                outs = outs + (self._mask_forward(i, x, rois[:100])['mask_pred'], )
        return outs

    def _bbox_forward_train(self, stage, x, sampling_results, gt_bboxes, gt_labels,
                            rcnn_train_cfg):
        rois = bbox2roi([res.bboxes for res in sampling_results])
        bbox_results = self._bbox_forward(stage, x, rois)
        head = self.bbox_head[stage]
        bbox_targets = head.get_targets(sampling_results, gt_bboxes, gt_labels, rcnn_train_cfg)
        loss_bbox = head.loss(bbox_results['cls_score'], bbox_results['bbox_pred'], rois,
                              *bbox_targets)
        bbox_results.update(loss_bbox=loss_bbox, rois=rois, bbox_targets=bbox_targets)
        return bbox_results

    def _mask_forward_train(self, stage, x, sampling_results, gt_masks, rcnn_train_cfg):
        pos_rois = bbox2roi([res.pos_bboxes for res in sampling_results])
        mask_results = self._mask_forward(stage, x, pos_rois)
        head = self.mask_head[stage]
        mask_targets = head.get_targets(sampling_results, gt_masks, rcnn_train_cfg)
        pos_labels = torch.cat([res.pos_gt_labels for res in sampling_results])
        mask_results.update(loss_mask=head.loss(mask_results['mask_pred'], mask_targets,
                                                pos_labels))
        return mask_results

    def _sample(self, stage, x, img_metas, proposal_list, gt_bboxes, gt_labels,
                gt_bboxes_ignore):
        results = []
        for j in range(len(img_metas)):
            assign_result = self.bbox_assigner[stage].assign(
                proposal_list[j], gt_bboxes[j], gt_bboxes_ignore[j], gt_labels[j])
            results.append(self.bbox_sampler[stage].sample(
                assign_result, proposal_list[j], gt_bboxes[j], gt_labels[j],
                feats=[lvl_feat[j][None] for lvl_feat in x]))
        return results

    def forward_train(self, x, img_metas, proposal_list, gt_bboxes, gt_labels,
                      gt_bboxes_ignore=None, gt_masks=None, **kwargs):
        """The losses of every stage, ``s{i}.loss_cls``, ``s{i}.acc``, ``s{i}.loss_bbox``
        (and ``s{i}.loss_mask``), each loss times ``stage_loss_weights[i]`` (``acc`` not).
        ``kwargs`` (other annotations the pipeline collects) are unused, as in mmdet."""
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
        for i in range(self.num_stages):
            self.current_stage = i
            rcnn_train_cfg = self.train_cfg[i]
            lw = self.stage_loss_weights[i]
            sampling_results = self._sample(i, x, img_metas, proposal_list, gt_bboxes,
                                            gt_labels, gt_bboxes_ignore)
            bbox_results = self._bbox_forward_train(i, x, sampling_results, gt_bboxes,
                                                    gt_labels, rcnn_train_cfg)
            for name, value in bbox_results['loss_bbox'].items():
                losses[f's{i}.{name}'] = value * lw if 'loss' in name else value
            if self.with_mask:
                mask_results = self._mask_forward_train(i, x, sampling_results, gt_masks,
                                                        rcnn_train_cfg)
                for name, value in mask_results['loss_mask'].items():
                    losses[f's{i}.{name}'] = value * lw if 'loss' in name else value
            if i < self.num_stages - 1:
                head = self.bbox_head[i]
                pos_is_gts = [res.pos_is_gt for res in sampling_results]
                roi_labels = bbox_results['bbox_targets'][0]
                with torch.no_grad():
                    cls_score = bbox_results['cls_score']
                    if head.custom_activation:
                        cls_score = head.loss_cls.get_activation(cls_score)
                    if cls_score.numel() == 0:  # no RoI in the batch: no later stage (mmdet)
                        break
                    # negatives are regressed by the class they are taken for
                    roi_labels = torch.where(roi_labels == head.num_classes,
                                             cls_score[:, :-1].argmax(1), roi_labels)
                    proposal_list = head.refine_bboxes(bbox_results['rois'], roi_labels,
                                                       bbox_results['bbox_pred'], pos_is_gts,
                                                       img_metas)
        return losses

    # --------------------------------------------------------------------------------- test
    def _refined_stages(self, x, rois, img_metas, num_per_img, **bbox_kw):
        """Run the stages on ``rois`` (one batch), each refining them for the next: per image
        the last stage's ``rois`` and ``bbox_pred`` and the stages' mean ``cls_score``
        (``bbox_kw`` goes to ``_bbox_forward``: HTC's semantic feature)."""
        ms_scores = []
        for i in range(self.num_stages):
            bbox_results = self._bbox_forward(i, x, rois, **bbox_kw)
            rois = rois.split(num_per_img, 0)
            cls_score = bbox_results['cls_score'].split(num_per_img, 0)
            bbox_pred = bbox_results['bbox_pred']
            if isinstance(bbox_pred, torch.Tensor):
                bbox_pred = bbox_pred.split(num_per_img, 0)
            else:  # a head's own prediction structure (SABL's bucket pair)
                bbox_pred = self.bbox_head[i].bbox_pred_split(bbox_pred, num_per_img)
            ms_scores.append(cls_score)
            if i < self.num_stages - 1:
                head = self.bbox_head[i]
                if head.custom_activation:
                    cls_score = [head.loss_cls.get_activation(s) for s in cls_score]
                rois = torch.cat([
                    head.regress_by_class(rois[j], cls_score[j][:, :-1].argmax(dim=1),
                                          bbox_pred[j], img_metas[j])
                    for j in range(len(num_per_img)) if rois[j].shape[0] > 0])
        cls_score = [sum(score[j] for score in ms_scores) / float(len(ms_scores))
                     for j in range(len(num_per_img))]
        return rois, cls_score, bbox_pred

    def _test_rois(self, proposal_list, proposals):
        """``(rois, None)`` after the argument checks every cascade's ``simple_test`` shares,
        or ``(rois, results)`` when no image has a proposal: empty per-class arrays (and empty
        mask lists, with masks)."""
        owner = type(self).__name__
        if proposals is not None:
            raise ValueError(f'{owner}.simple_test takes the proposals as proposal_list; '
                             'proposals= must be None')
        if not self.test_cfg:
            raise ValueError(f'{owner}.simple_test needs test_cfg (score_thr, nms, '
                             f'max_per_img), got {self.test_cfg!r}')
        rois = bbox2roi(proposal_list)
        if rois.shape[0]:
            return rois, None
        num_classes = self.bbox_head[-1].num_classes
        bbox_results = [[np.zeros((0, 5), dtype=np.float32) for _ in range(num_classes)]
                        for _ in proposal_list]
        if not self.with_mask:
            return rois, bbox_results
        mask_head = self.mask_head[-1] if isinstance(self.mask_head, nn.ModuleList) \
            else self.mask_head
        return rois, [(b, [[] for _ in range(mask_head.num_classes)]) for b in bbox_results]

    def simple_test(self, x, proposal_list, img_metas, proposals=None, rescale=False):
        """Per image the per-class ``[k, 5]`` arrays, or with masks ``(bbox_results,
        segm_results)`` (mmdet's ``ms_bbox_result['ensemble']``, its only result)."""
        rois, empty = self._test_rois(proposal_list, proposals)
        if empty is not None:
            return empty
        num_classes = self.bbox_head[-1].num_classes
        num_imgs = len(proposal_list)
        num_per_img = tuple(len(p) for p in proposal_list)
        rois, cls_score, bbox_pred = self._refined_stages(x, rois, img_metas, num_per_img)
        det_bboxes, det_labels = [], []
        for i, meta in enumerate(img_metas):
            if rois[i].shape[0] == 0:
                det_bbox, det_label = rois[i].new_zeros(0, 5), rois[i].new_zeros(
                    (0, ), dtype=torch.long)
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
        segm_results = self.simple_test_mask(x, img_metas, det_bboxes, det_labels, rescale)
        return list(zip(bbox_results, segm_results))

    def simple_test_mask(self, x, img_metas, det_bboxes, det_labels, rescale=False):
        """Per image the masks of its detections: the mean of every stage's mask
        probabilities, pasted by the last stage's mask head."""
        num_classes = self.mask_head[-1].num_classes
        if all(det_bbox.shape[0] == 0 for det_bbox in det_bboxes):
            return [[[] for _ in range(num_classes)] for _ in det_bboxes]
        scale_factors = [meta['scale_factor'] for meta in img_metas]
        if rescale and not isinstance(scale_factors[0], float):
            scale_factors = [torch.as_tensor(np.asarray(s)).to(det_bboxes[0].device)
                             for s in scale_factors]
        _bboxes = [det_bboxes[i][:, :4] * scale_factors[i] if rescale else det_bboxes[i][:, :4]
                   for i in range(len(det_bboxes))]
        mask_rois = bbox2roi(_bboxes)
        num_per_img = tuple(b.size(0) for b in _bboxes)
        aug_masks = []
        for i in range(self.num_stages):
            mask_pred = self._mask_forward(i, x, mask_rois)['mask_pred'].split(num_per_img, 0)
            aug_masks.append([m.sigmoid().cpu().detach().numpy() for m in mask_pred])
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

    def aug_test(self, features, proposal_list, img_metas, rescale=False):
        """mmdet 2.x test-time augmentation of one image (see
        :meth:`StandardRoIHead.aug_test` for the arguments): per augmentation the cascade's
        boxes and mean scores, merged (``merge_aug_bboxes``) and NMSed; the masks are every
        stage's of every augmentation (:meth:`_aug_mask_preds`), flipped back and averaged.
        Each stage refines with the labels of the foreground scores, as ``simple_test`` does
        (mmdet's ``aug_test`` takes the argmax over the background column too). With
        ``rescale=False`` the boxes and masks are at the first augmentation's scale, as
        mmdet's docstring says (its code returns them at the original scale)."""
        if not self.test_cfg:
            raise ValueError(f'{type(self).__name__}.aug_test needs test_cfg (score_thr, nms, '
                             f'max_per_img), got {self.test_cfg!r}')
        if len(features) != len(img_metas) or len(proposal_list) != 1:
            raise ValueError(f'aug_test needs features and img_metas per augmentation and the '
                             f'proposals of one image, got {len(features)}, {len(img_metas)} '
                             f'and {len(proposal_list)}')
        extras = [self._aug_test_feats(x) for x in features]
        aug_bboxes, aug_scores = [], []
        for x, aug_metas, extra in zip(features, img_metas, extras):
            flip, direction = aug_flip(aug_metas)
            meta = aug_metas[0]
            proposals = bbox_mapping(proposal_list[0][:, :4], meta['img_shape'],
                                     meta['scale_factor'], flip, direction or 'horizontal')
            rois = bbox2roi([proposals])
            if rois.shape[0] == 0:
                aug_bboxes.append(rois.new_zeros(0, 4))
                aug_scores.append(rois.new_zeros(0, 1))
                continue
            rois, cls_score, bbox_pred = self._refined_stages(x, rois, aug_metas,
                                                              (rois.shape[0], ), **extra)
            bboxes, scores = self.bbox_head[-1].get_bboxes(
                rois[0], cls_score[0], bbox_pred[0], meta['img_shape'], meta['scale_factor'],
                rescale=False, cfg=None)
            aug_bboxes.append(bboxes)
            aug_scores.append(scores)
        bboxes, scores = merge_aug_bboxes(aug_bboxes, aug_scores, img_metas, self.test_cfg)
        det_bboxes, det_labels = multiclass_nms(
            bboxes, scores, cfg_get(self.test_cfg, 'score_thr'), cfg_get(self.test_cfg, 'nms'),
            cfg_get(self.test_cfg, 'max_per_img', -1))
        scale = det_bboxes.new_ones(4) if rescale else \
            det_bboxes.new_tensor(img_metas[0][0]['scale_factor']).expand(4)
        out_bboxes = det_bboxes.clone()
        out_bboxes[:, :4] *= scale
        bbox_result = bbox2result(out_bboxes, det_labels, self.bbox_head[-1].num_classes)
        if not self.with_mask:
            return [bbox_result]
        if det_bboxes.shape[0] == 0:
            return [(bbox_result, [[] for _ in range(self._last_mask_head().num_classes)])]
        aug_masks, aug_img_metas = [], []
        for x, aug_metas, extra in zip(features, img_metas, extras):
            flip, direction = aug_flip(aug_metas)
            meta = aug_metas[0]
            mask_rois = bbox2roi([bbox_mapping(det_bboxes[:, :4], meta['img_shape'],
                                               meta['scale_factor'], flip,
                                               direction or 'horizontal')])
            for mask_pred in self._aug_mask_preds(x, mask_rois, extra):
                aug_masks.append(mask_pred.sigmoid().cpu().numpy())
                aug_img_metas.append(aug_metas)
        merged = merge_aug_masks(aug_masks, aug_img_metas, self.test_cfg)
        segm_result = self._last_mask_head().get_seg_masks(
            merged, out_bboxes[:, :4], det_labels, self.test_cfg, img_metas[0][0]['ori_shape'],
            scale_factor=scale, rescale=False)
        return [(bbox_result, segm_result)]

    def _aug_test_feats(self, x):
        """The keywords the stages take besides the features, for one augmentation (HTC's
        semantic feature, SCNet's global context): none here."""
        return {}

    def _aug_mask_preds(self, x, rois, extra):
        """The mask logits that ``aug_test`` averages for one augmentation: every stage's."""
        return [self._mask_forward(i, x, rois)['mask_pred'] for i in range(self.num_stages)]

    def _last_mask_head(self):
        return self.mask_head[-1]
