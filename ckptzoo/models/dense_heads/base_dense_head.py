"""mmdet 2.x ``BaseDenseHead``: what every dense head shares once its ``forward`` gives per-level
maps — the training entry (``forward_train``), decoding to detections (``get_bboxes``, with the
optional per-prior ``score_factors`` of FCOS / ATSS / PAA centerness or IoU branches) and
test-time augmentation. Subclasses give ``prior_generator``, ``bbox_coder``,
``cls_out_channels``, ``use_sigmoid_cls``, ``test_cfg`` and ``loss``."""
import torch
import torch.nn as nn

from ...core.bbox import bbox_mapping_back
from ...ops.nms import batched_nms
from ...runner.checkpoint import load_checkpoint
from ...runner.fp16 import force_fp32
from ...utils.cfg_get import cfg_get

__all__ = ['BaseDenseHead']


class BaseDenseHead(nn.Module):
    """Base of the dense (one-stage and RPN) heads."""

    def init_weights(self):
        """Load a ``Pretrained`` init_cfg; the other kinds were applied at construction."""
        if isinstance(self.init_cfg, dict) and self.init_cfg.get('type') == 'Pretrained':
            load_checkpoint(self, self.init_cfg['checkpoint'], map_location='cpu',
                            strict=False, prefix=self.init_cfg.get('prefix'))

    def _zero_conv_offsets(self):
        """mmdet's ``BaseDenseHead.init_weights`` ends by zeroing every deformable conv's
        ``conv_offset`` (an init_cfg over 'Conv2d' layers reaches it): deformable layers start
        as plain convs. Heads call it once their init_cfg is applied."""
        for m in self.modules():
            if hasattr(m, 'conv_offset'):
                nn.init.zeros_(m.conv_offset.weight)
                if m.conv_offset.bias is not None:
                    nn.init.zeros_(m.conv_offset.bias)

    def forward_train(self, x, img_metas, gt_bboxes, gt_labels=None, gt_bboxes_ignore=None,
                      proposal_cfg=None, **kwargs):
        """mmdet 2.x ``BaseDenseHead.forward_train``: the losses, and with ``proposal_cfg``
        also the boxes ``get_bboxes`` makes with that config (an RPN's proposals):
        ``(losses, proposal_list)``. Without ``gt_labels`` (an RPN) ``loss`` is called without
        them, as mmdet does."""
        outs = self(x)
        if gt_labels is None:
            losses = self.loss(*outs, gt_bboxes, img_metas, gt_bboxes_ignore=gt_bboxes_ignore)
        else:
            losses = self.loss(*outs, gt_bboxes, gt_labels, img_metas,
                               gt_bboxes_ignore=gt_bboxes_ignore)
        if proposal_cfg is None:
            return losses
        return losses, self.get_bboxes(*outs, img_metas=img_metas, cfg=proposal_cfg)

    # ------------------------------------------------------------- inference
    def simple_test(self, feats, img_metas, rescale=False):
        """Per image ``(det_bboxes [k, 5], det_labels [k])``."""
        return self.get_bboxes(*self(feats), img_metas=img_metas, rescale=rescale)

    simple_test_bboxes = simple_test

    #: numbers per prior in ``bbox_pred`` (4 box deltas or distances; GFL's distributions
    #: override it).
    bbox_pred_dims = 4

    def aug_test(self, feats, img_metas, rescale=False):
        """mmdet 2.x test-time augmentation of one image: every augmentation's boxes (before
        NMS) mapped back to the original image, merged, then class-wise NMS.

        ``feats`` is a list over augmentations of per-level features, ``img_metas`` a list
        over augmentations of one-dict lists. Returns ``[(det_bboxes, det_labels)]``.
        """
        if any(len(metas) != 1 for metas in img_metas):
            raise ValueError(f'aug_test takes one image per augmentation, got '
                             f'{[len(m) for m in img_metas]}')
        all_bboxes, all_scores, all_labels = [], [], []
        for x, metas in zip(feats, img_metas):
            bboxes, scores, labels = self.get_bboxes(*self(x), img_metas=metas, rescale=False,
                                                     with_nms=False)[0]
            meta = metas[0]
            all_bboxes.append(bbox_mapping_back(bboxes, meta['img_shape'], meta['scale_factor'],
                                                meta.get('flip', False),
                                                meta.get('flip_direction') or 'horizontal'))
            all_scores.append(scores)
            all_labels.append(labels)
        bboxes, scores = torch.cat(all_bboxes), torch.cat(all_scores)
        labels = torch.cat(all_labels)
        if bboxes.numel() == 0:
            dets = torch.cat([bboxes, scores[:, None]], -1)
        else:
            dets, labels = self._nms(bboxes, scores, labels, self.test_cfg)
        if not rescale:
            dets = dets.clone()
            dets[:, :4] *= dets.new_tensor(img_metas[0][0]['scale_factor'])
        return [(dets, labels)]

    @force_fp32(apply_to=('cls_scores', 'bbox_preds', 'score_factors'))
    def get_bboxes(self, cls_scores, bbox_preds, score_factors=None, img_metas=None, cfg=None,
                   rescale=False, with_nms=True, **kwargs):
        """Detections per image as mmdet 2.x: per level the ``nms_pre`` best (prior, class)
        scores above ``score_thr``, decoded and clipped to ``img_shape``, divided by
        ``scale_factor`` when ``rescale``, multiplied by the sigmoid of ``score_factors``
        (centerness, IoU) where the head has them, then class-wise NMS and ``max_per_img``.
        The head's outputs are detached first (mmdet's ``select_single_mlvl``): no gradient
        flows through the boxes.

        Returns a list of ``(det_bboxes [k, 5] (x1, y1, x2, y2, score), det_labels [k])``
        (``(bboxes, scores, labels)`` with ``with_nms=False``).
        """
        if len(cls_scores) != len(bbox_preds):
            raise ValueError(f'cls_scores and bbox_preds need one entry per level, got '
                             f'{len(cls_scores)} and {len(bbox_preds)}')
        if score_factors is not None and len(score_factors) != len(cls_scores):
            raise ValueError(f'score_factors need one entry per level ({len(cls_scores)}), '
                             f'got {len(score_factors)}')
        if img_metas is None or len(img_metas) != cls_scores[0].size(0):
            raise ValueError('get_bboxes needs one img_meta per image')
        featmap_sizes = [s.shape[-2:] for s in cls_scores]
        priors = self.prior_generator.grid_priors(featmap_sizes, dtype=cls_scores[0].dtype,
                                                  device=cls_scores[0].device)
        results = []
        for i, meta in enumerate(img_metas):
            factors = [None] * len(cls_scores) if score_factors is None \
                else [f[i].detach() for f in score_factors]
            results.append(self._get_bboxes_single(
                [s[i].detach() for s in cls_scores], [b[i].detach() for b in bbox_preds],
                factors, priors, meta, cfg, rescale, with_nms, **kwargs))
        return results

    def _get_bboxes_single(self, cls_score_list, bbox_pred_list, score_factor_list, mlvl_priors,
                           img_meta, cfg, rescale=False, with_nms=True, **kwargs):
        cfg = self.test_cfg if cfg is None else cfg
        if cfg is None:
            raise ValueError(f'{type(self).__name__} needs test_cfg (nms_pre, score_thr, nms, '
                             'max_per_img) to predict boxes')
        with_factors = score_factor_list[0] is not None
        img_shape = img_meta['img_shape']
        nms_pre = cfg_get(cfg, 'nms_pre', -1)
        score_thr = cfg_get(cfg, 'score_thr', 0)
        mlvl_bboxes, mlvl_scores, mlvl_labels, mlvl_factors = [], [], [], []
        for cls_score, bbox_pred, factor, priors in zip(cls_score_list, bbox_pred_list,
                                                        score_factor_list, mlvl_priors):
            bbox_pred = bbox_pred.permute(1, 2, 0).reshape(-1, self.bbox_pred_dims)
            cls_score = cls_score.permute(1, 2, 0).reshape(-1, self.cls_out_channels)
            scores = cls_score.sigmoid() if self.use_sigmoid_cls \
                else cls_score.softmax(-1)[:, :-1]
            valid = scores > score_thr
            scores = scores[valid]
            idxs = torch.nonzero(valid, as_tuple=False)
            scores, order = scores.sort(descending=True)
            if nms_pre is not None and nms_pre > 0:  # mmdet drops one box for nms_pre=-1
                scores, order = scores[:nms_pre], order[:nms_pre]
            keep, labels = idxs[order].unbind(dim=1)
            bboxes = self.bbox_coder.decode(priors[keep], bbox_pred[keep], max_shape=img_shape)
            mlvl_bboxes.append(bboxes)
            mlvl_scores.append(scores)
            mlvl_labels.append(labels)
            if with_factors:
                mlvl_factors.append(factor.permute(1, 2, 0).reshape(-1).sigmoid()[keep])
        return self._bbox_post_process(mlvl_scores, mlvl_labels, mlvl_bboxes,
                                       img_meta['scale_factor'], cfg, rescale, with_nms,
                                       mlvl_factors if with_factors else None)

    def _bbox_post_process(self, mlvl_scores, mlvl_labels, mlvl_bboxes, scale_factor, cfg,
                           rescale=False, with_nms=True, mlvl_score_factors=None, **kwargs):
        """Rescale, apply the score factors, drop boxes not larger than ``min_bbox_size``
        (where the config sets one), then NMS."""
        bboxes = torch.cat(mlvl_bboxes)
        scores = torch.cat(mlvl_scores)
        labels = torch.cat(mlvl_labels)
        if rescale:
            bboxes = bboxes / bboxes.new_tensor(scale_factor)
        if mlvl_score_factors is not None:
            scores = scores * torch.cat(mlvl_score_factors)
        min_bbox_size = cfg_get(cfg, 'min_bbox_size', 0)
        if min_bbox_size and min_bbox_size > 0:
            wh = bboxes[:, 2:] - bboxes[:, :2]
            big = (wh > min_bbox_size).all(dim=1)
            bboxes, scores, labels = bboxes[big], scores[big], labels[big]
        if not with_nms:
            return bboxes, scores, labels
        if bboxes.numel() == 0:
            return torch.cat([bboxes, scores[:, None]], -1), labels
        return self._nms(bboxes, scores, labels, cfg)

    def _nms(self, bboxes, scores, labels, cfg):
        """Class-wise NMS (mmcv ``batched_nms``), best first, ``max_per_img``."""
        dets, keep = batched_nms(bboxes, scores, labels,
                                 cfg_get(cfg, 'nms', dict(type='nms', iou_threshold=0.5)))
        max_per_img = cfg_get(cfg, 'max_per_img', -1)
        if max_per_img is not None and max_per_img > 0:
            dets, keep = dets[:max_per_img], keep[:max_per_img]
        return dets, labels[keep]
