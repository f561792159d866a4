"""mmdet 2.x ``SparseRoIHead``: the iterative heads of Sparse R-CNN (Sun et al. 2021) and
QueryInst (Fang et al. 2021).

Each of ``num_stages`` stages pools RoI features of the current boxes, lets its
:class:`~ckptzoo.models.roi_heads.bbox_heads.DIIHead` update the object features (self
attention over the proposals, a dynamic convolution with the RoI features, an FFN) and
predict classes and box deltas; the decoded boxes and the object features go to the next
stage. Training: every stage's predictions are matched one to one to the ground truths
(``HungarianAssigner``, so the sampler must be ``PseudoSampler``) and get their losses,
``stage{i}_loss_cls``, ``stage{i}_pos_acc``, ``stage{i}_loss_bbox``, ``stage{i}_loss_iou``
(and QueryInst's ``stage{i}_loss_mask``, from the positives' masks made by that stage's
``DynamicMaskHead`` with its attention features). Test: the last stage's scores, the top
``max_per_img`` (proposal, class) pairs over all proposals and classes (no NMS), and with
masks the last stage's mask of each.

Checkpoint units, as :class:`~ckptzoo.models.roi_heads.CascadeRoIHead`'s: ``bbox.{i}``, stage
``i``'s RoI extraction and DII head, and ``mask.{i}`` (QueryInst), its mask RoI extraction and
dynamic mask head, in training order (``bbox.0``, ``mask.0``, ``bbox.1`` ...); at test only the
last stage runs its ``mask`` unit.

Fixes over mmdet, which leave its results otherwise equal: in ``simple_test`` every image's
masks are those of its own top-k detections (mmdet took every image's masks at the last
image's top-k indices); ``stage{i}_pos_acc`` is not multiplied by the stage's loss weight
(it is no loss); the default ``bbox_head`` takes DIIHead's arguments (mmdet's default had
``num_fcs`` / ``hidden_channels``, which DIIHead refuses).
"""
from functools import partial

import numpy as np
import torch

from ...core.bbox import bbox2result, bbox2roi
from ...core.bbox.samplers import PseudoSampler
from ...core.bbox.transforms import bbox_xyxy_to_cxcywh
from ...registry import MODELS
from ..utils.pretrained import load_pretrained
from .cascade_roi_head import CascadeRoIHead

__all__ = ['SparseRoIHead']


@MODELS.register_module()
class SparseRoIHead(CascadeRoIHead):
    """Args (mmdet 2.x's):
        num_stages (int): the iterative stages (default 6).
        stage_loss_weights (list[float]): one weight per stage for its losses.
        proposal_feature_channel (int): channels of the object features (default 256).
        bbox_roi_extractor, bbox_head (dict | list[dict]): one config for every stage, or one
            per stage (``DIIHead``).
        mask_roi_extractor, mask_head (dict | list | None): QueryInst's mask branch
            (``DynamicMaskHead``); a None extractor shares the box ones.
        train_cfg (list[dict] | None): per stage ``assigner`` (``HungarianAssigner``),
            ``sampler`` (``PseudoSampler`` only), ``pos_weight``, ``mask_size``.
        test_cfg (dict | None): ``max_per_img`` (the detections per image), ``mask_thr_binary``.
        pretrained, init_cfg, with_cp, cp_use_reentrant: as :class:`CascadeRoIHead`.
    """

    def __init__(self, num_stages=6, stage_loss_weights=(1, 1, 1, 1, 1, 1),
                 proposal_feature_channel=256,
                 bbox_roi_extractor=dict(type='SingleRoIExtractor',
                                         roi_layer=dict(type='RoIAlign', output_size=7,
                                                        sampling_ratio=2),
                                         out_channels=256, featmap_strides=[4, 8, 16, 32]),
                 mask_roi_extractor=None,
                 bbox_head=dict(type='DIIHead', num_classes=80, num_ffn_fcs=2, num_heads=8,
                                num_cls_fcs=1, num_reg_fcs=3, feedforward_channels=2048,
                                in_channels=256, dropout=0.0, roi_feat_size=7,
                                ffn_act_cfg=dict(type='ReLU', inplace=True)),
                 mask_head=None, train_cfg=None, test_cfg=None, pretrained=None, init_cfg=None,
                 with_cp=False, cp_use_reentrant=False):
        self.proposal_feature_channel = proposal_feature_channel
        super().__init__(num_stages, stage_loss_weights, bbox_roi_extractor=bbox_roi_extractor,
                         bbox_head=bbox_head, mask_roi_extractor=mask_roi_extractor,
                         mask_head=mask_head, train_cfg=train_cfg, test_cfg=test_cfg,
                         pretrained=pretrained, init_cfg=init_cfg, with_cp=with_cp,
                         cp_use_reentrant=cp_use_reentrant)
        for i, sampler in enumerate(self.bbox_sampler):
            if not isinstance(sampler, PseudoSampler):
                raise ValueError(f'Sparse R-CNN and QueryInst only support PseudoSampler '
                                 f'(the assigner matches one to one), got '
                                 f'{type(sampler).__name__} in train_cfg.rcnn[{i}]')

    def init_weights(self):
        """As :class:`CascadeRoIHead`'s, but the mask heads keep their construction-time init:
        mmdet's cascade holds them in a plain ``nn.ModuleList``, which mmcv's ``init_weights``
        does not enter, so ``DynamicMaskHead.init_weights`` never runs in mmdet's QueryInst (its
        trained weights started from that init)."""
        if isinstance(self.init_cfg, dict) and self.init_cfg.get('type') == 'Pretrained':
            load_pretrained(self, self.init_cfg, type(self).__name__)
        parts = [*self.bbox_roi_extractor, *self.bbox_head]
        if self.with_mask and not self.share_roi_extractor:
            parts += [*self.mask_roi_extractor]
        for m in parts:
            if hasattr(m, 'init_weights'):
                m.init_weights()

    # ----------------------------------------------------------------------- checkpoint units
    def _bbox_forward_unit(self, stage, rois, object_feats, *feats):
        bbox_feats = self.bbox_roi_extractor[stage](list(feats), rois)
        return self.bbox_head[stage](bbox_feats, object_feats)

    def _mask_forward_unit(self, stage, rois, attn_feats, *feats):
        mask_feats = self.mask_roi_extractor[stage](list(feats), rois)
        return self.mask_head[stage](mask_feats, attn_feats)

    def _bbox_forward(self, stage, x, rois, object_feats, img_metas):
        """Stage ``stage`` on ``rois`` through its ``bbox`` unit: ``cls_score [B, N, C]``,
        ``decode_bbox_pred [B * N, 4]`` (the deltas decoded on the RoIs), ``object_feats``,
        ``attn_feats [B, N, C']`` and the detached per-image scores and boxes."""
        num_imgs = len(img_metas)
        feats = tuple(x[:self.bbox_roi_extractor[stage].num_inputs])
        cls_score, bbox_pred, object_feats, attn_feats = self.bbox_units[stage](
            partial(self._bbox_forward_unit, stage), rois, object_feats, *feats,
            module=self._bbox_modules(stage))
        num_proposals = object_feats.size(1)
        proposal_list = self.bbox_head[stage].refine_bboxes(
            rois, rois.new_zeros(len(rois)), bbox_pred.view(-1, bbox_pred.size(-1)),
            [rois.new_zeros(num_proposals) for _ in range(num_imgs)], img_metas)
        return dict(cls_score=cls_score, decode_bbox_pred=torch.cat(proposal_list),
                    object_feats=object_feats, attn_feats=attn_feats,
                    detach_cls_score_list=[cls_score[i].detach() for i in range(num_imgs)],
                    detach_proposal_list=[p.detach() for p in proposal_list])

    def _mask_forward(self, stage, x, rois, attn_feats):
        """Stage ``stage``'s mask logits of ``rois`` with their attention features
        ``[len(rois), C']``, through its ``mask`` unit."""
        feats = tuple(x[:self.mask_roi_extractor[stage].num_inputs])
        mask_pred = self.mask_units[stage](partial(self._mask_forward_unit, stage), rois,
                                           attn_feats, *feats,
                                           module=self._mask_modules(stage))
        return dict(mask_pred=mask_pred)

    # ------------------------------------------------------------------------------ forward
    def _mask_forward_train(self, stage, x, attn_feats, sampling_results, gt_masks,
                            rcnn_train_cfg):
        pos_rois = bbox2roi([res.pos_bboxes for res in sampling_results])
        attn_feats = torch.cat([feats[res.pos_inds]
                                for feats, res in zip(attn_feats, sampling_results)])
        mask_results = self._mask_forward(stage, x, pos_rois, attn_feats)
        head = self.mask_head[stage]
        mask_targets = head.get_targets(sampling_results, gt_masks, rcnn_train_cfg)
        pos_labels = torch.cat([res.pos_gt_labels for res in sampling_results])
        mask_results.update(head.loss(mask_results['mask_pred'], mask_targets, pos_labels))
        return mask_results

    def _check_batch(self, proposal_boxes, proposal_features, img_metas, imgs_whwh):
        num_imgs = len(img_metas)
        if proposal_boxes.dim() != 3 or proposal_boxes.size(0) != num_imgs or \
                proposal_features.shape[:2] != proposal_boxes.shape[:2]:
            raise ValueError(f'{type(self).__name__} takes proposal_boxes [B, N, 4] and '
                             f'proposal_features [B, N, C] for {num_imgs} images, got '
                             f'{tuple(proposal_boxes.shape)} and '
                             f'{tuple(proposal_features.shape)}')
        if imgs_whwh is None:
            raise ValueError(f'{type(self).__name__} needs imgs_whwh [B, 1, 4] (from the '
                             'EmbeddingRPNHead)')

    def forward_train(self, x, proposal_boxes, proposal_features, img_metas, gt_bboxes,
                      gt_labels, gt_bboxes_ignore=None, imgs_whwh=None, gt_masks=None):
        """Every stage's losses ``stage{i}_{name}``, each loss times its stage weight.

        Args:
            x (list[Tensor]): the neck's features.
            proposal_boxes (Tensor): ``[B, N, 4]`` corner boxes; proposal_features (Tensor):
                ``[B, N, C]`` (both from the ``EmbeddingRPNHead``).
            img_metas (list[dict]), gt_bboxes, gt_labels: per image.
            gt_bboxes_ignore: accepted and unused (as mmdet: the Hungarian matching has no
                ignore).
            imgs_whwh (Tensor): ``[B, 1, 4]`` each image's ``(w, h, w, h)``.
            gt_masks (list | None): QueryInst's ground-truth masks.
        """
        owner = type(self).__name__
        if not self.train_cfg:
            raise ValueError(f'{owner}.forward_train needs train_cfg (one dict per stage), '
                             f'got {self.train_cfg!r}')
        self._check_batch(proposal_boxes, proposal_features, img_metas, imgs_whwh)
        if self.with_mask and gt_masks is None:
            raise ValueError(f'{owner} with a mask head needs gt_masks to train')
        num_imgs = len(img_metas)
        num_proposals = proposal_boxes.size(1)
        imgs_whwh = imgs_whwh.repeat(1, num_proposals, 1)
        proposal_list = [proposal_boxes[i] for i in range(num_imgs)]
        object_feats = proposal_features
        losses = {}
        for stage in range(self.num_stages):
            rois = bbox2roi(proposal_list)
            bbox_results = self._bbox_forward(stage, x, rois, object_feats, img_metas)
            cls_pred_list = bbox_results['detach_cls_score_list']
            proposal_list = bbox_results['detach_proposal_list']
            sampling_results = []
            for i in range(num_imgs):
                normalized = bbox_xyxy_to_cxcywh(proposal_list[i] / imgs_whwh[i])
                assign_result = self.bbox_assigner[stage].assign(
                    normalized, cls_pred_list[i], gt_bboxes[i], gt_labels[i], img_metas[i])
                sampling_results.append(self.bbox_sampler[stage].sample(
                    assign_result, proposal_list[i], gt_bboxes[i]))
            head = self.bbox_head[stage]
            bbox_targets = head.get_targets(sampling_results, gt_bboxes, gt_labels,
                                            self.train_cfg[stage], True)
            cls_score = bbox_results['cls_score']
            stage_loss = head.loss(cls_score.view(-1, cls_score.size(-1)),
                                   bbox_results['decode_bbox_pred'].view(-1, 4), *bbox_targets,
                                   imgs_whwh=imgs_whwh)
            if self.with_mask:
                mask_results = self._mask_forward_train(stage, x, bbox_results['attn_feats'],
                                                        sampling_results, gt_masks,
                                                        self.train_cfg[stage])
                stage_loss['loss_mask'] = mask_results['loss_mask']
            weight = self.stage_loss_weights[stage]
            for key, value in stage_loss.items():
                losses[f'stage{stage}_{key}'] = value * weight if 'loss' in key else value
            object_feats = bbox_results['object_feats']
        return losses

    # --------------------------------------------------------------------------------- test
    def simple_test(self, x, proposal_boxes, proposal_features, img_metas, imgs_whwh,
                    rescale=False):
        """Per image the per-class ``[k, 5]`` arrays of its top ``max_per_img`` (proposal,
        class) scores, or with masks ``(bbox_results, segm_results)``."""
        if not self.test_cfg or self.test_cfg.get('max_per_img') is None:
            raise ValueError(f'{type(self).__name__}.simple_test needs test_cfg with '
                             f'max_per_img, got {self.test_cfg!r}')
        self._check_batch(proposal_boxes, proposal_features, img_metas, imgs_whwh)
        num_imgs = len(img_metas)
        num_classes = self.bbox_head[-1].num_classes
        proposal_list = [proposal_boxes[i] for i in range(num_imgs)]
        object_feats = proposal_features
        for stage in range(self.num_stages):
            bbox_results = self._bbox_forward(stage, x, bbox2roi(proposal_list), object_feats,
                                              img_metas)
            object_feats = bbox_results['object_feats']
            cls_score = bbox_results['cls_score']
            proposal_list = bbox_results['detach_proposal_list']
        if self.with_mask:
            mask_pred = self._mask_forward(self.num_stages - 1, x, bbox2roi(proposal_list),
                                           bbox_results['attn_feats'])['mask_pred']
            mask_pred = mask_pred.reshape(num_imgs, -1, *mask_pred.size()[1:])
        if getattr(self.bbox_head[-1].loss_cls, 'use_sigmoid', False):
            cls_score = cls_score.sigmoid()
        else:
            cls_score = cls_score.softmax(-1)[..., :-1]
        max_per_img = self.test_cfg['max_per_img']
        det_bboxes, det_labels, topk_inds = [], [], []
        for img_id in range(num_imgs):
            # unsorted as mmdet: the same order, hence the same per-class arrays
            scores, topk_indices = cls_score[img_id].flatten(0, 1).topk(max_per_img,
                                                                         sorted=False)
            bboxes = proposal_list[img_id][topk_indices // num_classes]
            if rescale:
                bboxes = bboxes / bboxes.new_tensor(img_metas[img_id]['scale_factor'])
            det_bboxes.append(torch.cat([bboxes, scores[:, None]], dim=1))
            det_labels.append(topk_indices % num_classes)
            topk_inds.append(topk_indices)
        bbox_results = [bbox2result(det_bboxes[i], det_labels[i], num_classes)
                        for i in range(num_imgs)]
        if not self.with_mask:
            return bbox_results
        segm_results = []
        for img_id, meta in enumerate(img_metas):
            scale_factor = meta['scale_factor']
            bboxes = det_bboxes[img_id][:, :4]
            if rescale:  # back to the network input, where the masks are pasted from
                if not isinstance(scale_factor, float):
                    scale_factor = torch.as_tensor(np.asarray(scale_factor)).to(bboxes)
                bboxes = bboxes * scale_factor
            masks = mask_pred[img_id].flatten(0, 1)[topk_inds[img_id]]
            masks = masks[:, None].expand(-1, num_classes, -1, -1)
            segm_results.append(self.mask_head[-1].get_seg_masks(
                masks, bboxes, det_labels[img_id], self.test_cfg, meta['ori_shape'],
                scale_factor, rescale))
        return list(zip(bbox_results, segm_results))

    def aug_test(self, features, proposal_list, img_metas, rescale=False):
        raise NotImplementedError('Sparse R-CNN and QueryInst do not support aug_test')

    def forward_dummy(self, x, proposal_boxes, proposal_features, img_metas):
        """Every stage's box results (and mask results) on the learned proposals (FLOP
        counting), as mmdet."""
        outs = []
        proposal_list = [proposal_boxes[i] for i in range(len(proposal_boxes))]
        object_feats = proposal_features
        for stage in range(self.num_stages):
            bbox_results = self._bbox_forward(stage, x, bbox2roi(proposal_list), object_feats,
                                              img_metas)
            outs.append((bbox_results, ))
            proposal_list = bbox_results['detach_proposal_list']
            object_feats = bbox_results['object_feats']
            if self.with_mask:
                outs[-1] += (self._mask_forward(stage, x, bbox2roi(proposal_list),
                                                bbox_results['attn_feats']), )
        return outs
