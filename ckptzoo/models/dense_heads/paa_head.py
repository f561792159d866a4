"""mmdet 2.x ``PAAHead`` (Kim & Lee 2020, probabilistic anchor assignment): ATSS's layers, the
centerness branch predicting the IoU of the decoded box. Anchors are first assigned by a
loose ``MaxIoUAssigner``; then, per ground truth, the ``topk`` candidates of lowest
classification + box loss on each level are split in two by a two-component Gaussian mixture
fitted to their losses, and those of the low-loss component up to its most likely one stay
positive; the others become negatives. Detections score ``sqrt(cls * iou)`` with optional
score voting.

mmdet fits the mixture with scikit-learn; :class:`GaussianMixture1D` follows its EM step for
step (the same assignments and scores), so scikit-learn is not needed.

State-dict keys equal mmdet's (ATSS's). Checkpoint units: ``level{i}``, one per level."""
import numpy as np
import torch

from ...core.utils.gaussian_mixture import GaussianMixture1D
from ...core.post_processing.bbox_nms import multiclass_nms
from ...registry import MODELS
from ...runner.fp16 import force_fp32
from ...utils.cfg_get import cfg_get
from ..losses.iou_loss import aligned_overlaps
from .anchor_head import AnchorHead
from .atss_head import ATSSHead

__all__ = ['PAAHead', 'levels_to_images']

EPS = 1e-12


def levels_to_images(mlvl_tensor):
    """``[per level: [B, C, H, W]]`` to ``[per image: [sum(H*W), C]]`` (levels concatenated)."""
    batch_size, channels = mlvl_tensor[0].size(0), mlvl_tensor[0].size(1)
    per_level = [t.permute(0, 2, 3, 1).reshape(batch_size, -1, channels) for t in mlvl_tensor]
    return [torch.cat([t[i] for t in per_level], 0) for i in range(batch_size)]


@MODELS.register_module()
class PAAHead(ATSSHead):
    """Args (mmdet 2.x's):
        topk (int): candidates of lowest loss taken per level and ground truth.
        score_voting (bool): refine each detection with the boxes of its class around it.
        covariance_type (str): the mixture's covariance; the losses are one-dimensional, and
            ``'diag'`` (mmdet's default, every shipped config) is the one supported.
        **kwargs: :class:`ATSSHead` arguments (``loss_centerness`` is the IoU branch's
            loss; ``train_cfg.assigner`` the first, loose assigner).

    ``get_bboxes`` needs ``with_nms=True`` (no test-time augmentation), as mmdet.
    ``test_cfg.score_voting`` (LAD's configs set it) is accepted and, as in mmdet, unread:
    the ``score_voting`` argument decides.
    """

    TEST_CFG_KEYS = AnchorHead.TEST_CFG_KEYS + ('score_voting', )

    def __init__(self, *args, topk=9, score_voting=True, covariance_type='diag', **kwargs):
        if isinstance(topk, bool) or not isinstance(topk, int) or topk < 1:
            raise ValueError(f'PAAHead topk must be a positive int, got {topk!r}')
        if covariance_type != 'diag':
            raise NotImplementedError(
                f"PAAHead covariance_type must be 'diag' (mmdet's default: the losses are "
                f"one-dimensional), got {covariance_type!r}")
        self.topk = topk
        self.with_score_voting = score_voting
        self.covariance_type = covariance_type
        super().__init__(*args, **kwargs)

    # ---------------------------------------------------------------- targets
    def get_targets(self, anchor_list, valid_flag_list, gt_bboxes_list, img_metas,
                    gt_bboxes_ignore_list=None, gt_labels_list=None, label_channels=1,
                    unmap_outputs=True):
        """Per image (not per level, as mmdet): ``(labels, label_weights, bbox_targets,
        bbox_weights, pos_inds, gt_inds)`` of the first, loose assignment."""
        if not unmap_outputs:
            raise ValueError('PAAHead maps its targets back to every anchor: unmap_outputs '
                             'must be True')
        num_imgs = len(img_metas)
        if not (len(anchor_list) == len(valid_flag_list) == len(gt_bboxes_list) == num_imgs):
            raise ValueError(f'anchors, valid flags and gt_bboxes need one entry per image '
                             f'({num_imgs}), got {len(anchor_list)}, {len(valid_flag_list)}, '
                             f'{len(gt_bboxes_list)}')
        gt_bboxes_ignore_list = gt_bboxes_ignore_list or [None] * num_imgs
        gt_labels_list = gt_labels_list if gt_labels_list is not None else [None] * num_imgs
        results = [AnchorHead._get_targets_single(
            self, torch.cat(anchor_list[i]), torch.cat(valid_flag_list[i]), gt_bboxes_list[i],
            gt_bboxes_ignore_list[i], gt_labels_list[i], img_metas[i], label_channels=1,
            unmap_outputs=True) for i in range(num_imgs)]
        labels, label_weights, bbox_targets, bbox_weights, _, _, sampling = zip(*results)
        # the positives' indices among all anchors (valid flags left some out)
        pos_inds = [((0 <= lab) & (lab < self.num_classes)).nonzero().view(-1)
                    for lab in labels]
        gt_inds = [s.pos_assigned_gt_inds for s in sampling]
        return (list(labels), list(label_weights), list(bbox_targets), list(bbox_weights),
                pos_inds, gt_inds)

    # ------------------------------------------------------------------ loss
    def _paa_assignment(self, cls_scores, bbox_preds, gt_bboxes, gt_labels, img_metas,
                        gt_bboxes_ignore=None):
        """The loose assignment, then the mixture's reassignment, over the batch:
        ``(labels, labels_weight, bboxes_target, bboxes_weight (per image, before the
        reassignment), pos_inds_flatten, flatten_anchors, num_pos)`` (LAD's teacher hands
        these to its student)."""
        if not self.train_cfg:
            raise ValueError(f'{type(self).__name__} needs train_cfg (assigner, ...) to assign '
                             f'anchors, got {self.train_cfg!r}')
        featmap_sizes = [f.size()[-2:] for f in cls_scores]
        if len(featmap_sizes) != self.prior_generator.num_levels:
            raise ValueError(f'got {len(featmap_sizes)} feature levels, the anchor generator '
                             f'has {self.prior_generator.num_levels} strides')
        device = cls_scores[0].device
        anchor_list, valid_flag_list = self.get_anchors(featmap_sizes, img_metas, device)
        labels, labels_weight, bboxes_target, bboxes_weight, pos_inds, pos_gt_index = \
            self.get_targets(anchor_list, valid_flag_list, gt_bboxes, img_metas,
                             gt_bboxes_ignore_list=gt_bboxes_ignore, gt_labels_list=gt_labels)
        cls_scores = [s.reshape(-1, self.cls_out_channels) for s in levels_to_images(cls_scores)]
        bbox_preds = [p.reshape(-1, 4) for p in levels_to_images(bbox_preds)]
        pos_losses_list = [self.get_pos_loss(*args)[0] for args in zip(
            anchor_list, cls_scores, bbox_preds, labels, labels_weight, bboxes_target,
            bboxes_weight, pos_inds)]
        with torch.no_grad():
            reassigned = [self.paa_reassign(*args) for args in zip(
                pos_losses_list, labels, labels_weight, bboxes_weight, pos_inds,
                pos_gt_index, anchor_list)]
            reassigned_labels, reassigned_weight, _, num_pos = zip(*reassigned)
            num_pos = sum(num_pos)
        labels = torch.cat(reassigned_labels, 0).view(-1)
        flatten_anchors = torch.cat([torch.cat(a, 0) for a in anchor_list])
        labels_weight = torch.cat(reassigned_weight, 0).view(-1)
        bboxes_target = torch.cat(bboxes_target, 0).view(-1, 4)
        pos_inds_flatten = ((labels >= 0) & (labels < self.num_classes)).nonzero().reshape(-1)
        return (labels, labels_weight, bboxes_target, bboxes_weight, pos_inds_flatten,
                flatten_anchors, num_pos)

    @staticmethod
    def _flatten(cls_scores, bbox_preds, iou_preds, cls_out_channels):
        return (torch.cat([s.reshape(-1, cls_out_channels) for s in levels_to_images(cls_scores)]),
                torch.cat([p.reshape(-1, 4) for p in levels_to_images(bbox_preds)]),
                torch.cat([p.reshape(-1, 1) for p in levels_to_images(iou_preds)]))

    @force_fp32(apply_to=('cls_scores', 'bbox_preds', 'iou_preds'))
    def loss(self, cls_scores, bbox_preds, iou_preds, gt_bboxes, gt_labels, img_metas,
             gt_bboxes_ignore=None):
        """``dict(loss_cls, loss_bbox, loss_iou)`` (tensors) after the reassignment; the box
        loss weighted by the predicted boxes' IoU with their targets."""
        labels, labels_weight, bboxes_target, _, pos_inds_flatten, flatten_anchors, num_pos = \
            self._paa_assignment(cls_scores, bbox_preds, gt_bboxes, gt_labels, img_metas,
                                 gt_bboxes_ignore)
        cls_scores, bbox_preds, iou_preds = self._flatten(cls_scores, bbox_preds, iou_preds,
                                                          self.cls_out_channels)
        losses_cls = self.loss_cls(cls_scores, labels, labels_weight,
                                   avg_factor=max(num_pos, len(img_metas)))
        if num_pos:
            pos_bbox_pred = self.bbox_coder.decode(flatten_anchors[pos_inds_flatten],
                                                   bbox_preds[pos_inds_flatten])
            pos_bbox_target = bboxes_target[pos_inds_flatten]
            iou_target = aligned_overlaps(pos_bbox_pred.detach(), pos_bbox_target)
            losses_iou = self.loss_centerness(iou_preds[pos_inds_flatten],
                                              iou_target.unsqueeze(-1), avg_factor=num_pos)
            losses_bbox = self.loss_bbox(pos_bbox_pred, pos_bbox_target,
                                         iou_target.clamp(min=EPS), avg_factor=iou_target.sum())
        else:
            losses_iou = iou_preds.sum() * 0
            losses_bbox = bbox_preds.sum() * 0
        return dict(loss_cls=losses_cls, loss_bbox=losses_bbox, loss_iou=losses_iou)

    def get_pos_loss(self, anchors, cls_score, bbox_pred, label, label_weight, bbox_target,
                     bbox_weight, pos_inds):
        """Per first-stage positive of one image, its classification (summed over classes)
        plus box loss, unreduced: ``(pos_loss, )``."""
        if not len(pos_inds):
            return cls_score.new([]),
        pos_anchors = torch.cat(anchors, 0)[pos_inds]
        pos_bbox_pred = self.bbox_coder.decode(pos_anchors, bbox_pred[pos_inds])
        loss_cls = self.loss_cls(cls_score[pos_inds], label[pos_inds], label_weight[pos_inds],
                                 avg_factor=1.0, reduction_override='none')
        loss_bbox = self.loss_bbox(pos_bbox_pred, bbox_target[pos_inds], bbox_weight[pos_inds],
                                   avg_factor=1.0, reduction_override='none')
        return loss_bbox + loss_cls.sum(-1),

    def paa_reassign(self, pos_losses, label, label_weight, bbox_weight, pos_inds,
                     pos_gt_inds, anchors):
        """One image: per ground truth, fit the mixture to the losses of its ``topk``
        lowest-loss candidates per level and keep the low-loss component's candidates up to
        its most likely one (:meth:`gmm_separation_scheme`); the rest of the first stage's
        positives become negatives. Returns ``(label, label_weight, bbox_weight, num_pos)``."""
        if not len(pos_inds):
            return label, label_weight, bbox_weight, 0
        label, label_weight, bbox_weight = label.clone(), label_weight.clone(), \
            bbox_weight.clone()
        bounds = np.cumsum([0] + [a.size(0) for a in anchors])
        pos_level_mask = [(pos_inds >= bounds[i]) & (pos_inds < bounds[i + 1])
                          for i in range(len(anchors))]
        pos_inds_after_paa = [label.new_tensor([])]
        ignore_inds_after_paa = [label.new_tensor([])]
        for gt_ind in range(int(pos_gt_inds.max()) + 1):
            pos_inds_gmm, pos_loss_gmm = [], []
            gt_mask = pos_gt_inds == gt_ind
            for level_mask in pos_level_mask:
                level_gt_mask = level_mask & gt_mask
                value, topk_inds = pos_losses[level_gt_mask].topk(
                    min(int(level_gt_mask.sum()), self.topk), largest=False)
                pos_inds_gmm.append(pos_inds[level_gt_mask][topk_inds])
                pos_loss_gmm.append(value)
            pos_inds_gmm, pos_loss_gmm = torch.cat(pos_inds_gmm), torch.cat(pos_loss_gmm)
            if len(pos_inds_gmm) < 2:
                continue
            pos_loss_gmm, sort_inds = pos_loss_gmm.sort()
            pos_inds_gmm = pos_inds_gmm[sort_inds]
            x = pos_loss_gmm.view(-1, 1).cpu().numpy()
            gmm = GaussianMixture1D(weights_init=np.array([0.5, 0.5]),
                                    means_init=np.array([x.min(), x.max()]).reshape(2, 1),
                                    precisions_init=np.array([1.0, 1.0]).reshape(2, 1))
            gmm.fit(x)
            device = pos_inds_gmm.device
            assignment = torch.from_numpy(gmm.predict(x)).to(device)
            scores = torch.from_numpy(gmm.score_samples(x)).to(device)
            pos_temp, ignore_temp = self.gmm_separation_scheme(assignment, scores,
                                                               pos_inds_gmm)
            pos_inds_after_paa.append(pos_temp)
            ignore_inds_after_paa.append(ignore_temp)
        pos_inds_after_paa = torch.cat(pos_inds_after_paa)
        ignore_inds_after_paa = torch.cat(ignore_inds_after_paa)
        reassign_ids = pos_inds[(pos_inds.unsqueeze(1) != pos_inds_after_paa).all(1)]
        label[reassign_ids] = self.num_classes
        label_weight[ignore_inds_after_paa] = 0
        bbox_weight[reassign_ids] = 0
        return label, label_weight, bbox_weight, len(pos_inds_after_paa)

    def gmm_separation_scheme(self, gmm_assignment, scores, pos_inds_gmm):
        """The candidates (sorted by loss) of component 0 up to the one the mixture scores
        highest are positive; none is ignored. ``(pos_inds, ignore_inds)``."""
        fgs = gmm_assignment == 0
        pos_inds_temp = fgs.new_tensor([], dtype=torch.long)
        ignore_inds_temp = fgs.new_tensor([], dtype=torch.long)
        if fgs.nonzero().numel():
            _, pos_thr_ind = scores[fgs].topk(1)
            pos_inds_temp = pos_inds_gmm[fgs][:pos_thr_ind + 1]
            ignore_inds_temp = pos_inds_gmm.new_tensor([])
        return pos_inds_temp, ignore_inds_temp

    # ------------------------------------------------------------- inference
    def get_bboxes(self, cls_scores, bbox_preds, score_factors=None, img_metas=None, cfg=None,
                   rescale=False, with_nms=True, **kwargs):
        if not with_nms:
            raise NotImplementedError('PAAHead predicts with NMS only (with_nms=True): it has '
                                      'no test-time augmentation, as mmdet')
        return super().get_bboxes(cls_scores, bbox_preds, score_factors, img_metas, cfg,
                                  rescale, with_nms, **kwargs)

    def aug_test(self, feats, img_metas, rescale=False):
        raise NotImplementedError('PAAHead has no test-time augmentation (as mmdet)')

    def _get_bboxes_single(self, cls_score_list, bbox_pred_list, score_factor_list, mlvl_priors,
                           img_meta, cfg, rescale=False, with_nms=True, **kwargs):
        """Per level the ``nms_pre`` priors of best ``sqrt(cls * iou)``, decoded and
        clipped, then :meth:`_bbox_post_process`."""
        cfg = self.test_cfg if cfg is None else cfg
        if cfg is None:
            raise ValueError('PAAHead needs test_cfg (nms_pre, score_thr, nms, max_per_img) '
                             'to predict boxes')
        nms_pre = cfg_get(cfg, 'nms_pre', -1)
        mlvl_bboxes, mlvl_scores, mlvl_score_factors = [], [], []
        for cls_score, bbox_pred, score_factor, priors in zip(
                cls_score_list, bbox_pred_list, score_factor_list, mlvl_priors):
            scores = cls_score.permute(1, 2, 0).reshape(-1, self.cls_out_channels).sigmoid()
            bbox_pred = bbox_pred.permute(1, 2, 0).reshape(-1, 4)
            score_factor = score_factor.permute(1, 2, 0).reshape(-1).sigmoid()
            if 0 < nms_pre < scores.shape[0]:
                max_scores, _ = (scores * score_factor[:, None]).sqrt().max(dim=1)
                _, topk_inds = max_scores.topk(nms_pre)
                priors, bbox_pred = priors[topk_inds, :], bbox_pred[topk_inds, :]
                scores, score_factor = scores[topk_inds, :], score_factor[topk_inds]
            mlvl_bboxes.append(self.bbox_coder.decode(priors, bbox_pred,
                                                      max_shape=img_meta['img_shape']))
            mlvl_scores.append(scores)
            mlvl_score_factors.append(score_factor)
        return self._bbox_post_process(mlvl_scores, mlvl_bboxes, img_meta['scale_factor'], cfg,
                                       rescale, with_nms, mlvl_score_factors)

    def _bbox_post_process(self, mlvl_scores, mlvl_bboxes, scale_factor, cfg, rescale=False,
                           with_nms=True, mlvl_score_factors=None, **kwargs):
        """Rescale, class-wise NMS on ``sqrt(cls * iou)``, then score voting."""
        mlvl_bboxes = torch.cat(mlvl_bboxes)
        if rescale:
            mlvl_bboxes = mlvl_bboxes / mlvl_bboxes.new_tensor(scale_factor)
        mlvl_scores = torch.cat(mlvl_scores)
        mlvl_scores = torch.cat([mlvl_scores, mlvl_scores.new_zeros(mlvl_scores.shape[0], 1)],
                                dim=1)  # the background column multiclass_nms drops
        mlvl_nms_scores = (mlvl_scores * torch.cat(mlvl_score_factors)[:, None]).sqrt()
        score_thr = cfg_get(cfg, 'score_thr', 0)
        det_bboxes, det_labels = multiclass_nms(
            mlvl_bboxes, mlvl_nms_scores, score_thr, cfg_get(cfg, 'nms'),
            cfg_get(cfg, 'max_per_img', -1), score_factors=None)
        if self.with_score_voting and len(det_bboxes) > 0:
            det_bboxes, det_labels = self.score_voting(det_bboxes, det_labels, mlvl_bboxes,
                                                       mlvl_nms_scores, score_thr)
        return det_bboxes, det_labels

    def score_voting(self, det_bboxes, det_labels, mlvl_bboxes, mlvl_nms_scores, score_thr):
        """Each detection's box becomes the average of its class's candidate boxes (score
        above ``score_thr``) overlapping it by IoU > 0.01, weighted by
        ``exp(-(1 - IoU)^2 / 0.025) * score``; its score stays. Detections come out grouped
        by class, as mmdet."""
        candidate_mask = mlvl_nms_scores > score_thr
        candidate_inds, candidate_labels = candidate_mask.nonzero(as_tuple=False).unbind(1)
        candidate_bboxes = mlvl_bboxes[candidate_inds]
        candidate_scores = mlvl_nms_scores[candidate_mask]
        voted_bboxes, voted_labels = [], []
        for cls in range(self.cls_out_channels):
            cls_mask = candidate_labels == cls
            if not cls_mask.any():
                continue
            cls_scores, cls_bboxes = candidate_scores[cls_mask], candidate_bboxes[cls_mask]
            det_cls_bboxes = det_bboxes[det_labels == cls].view(-1, det_bboxes.size(-1))
            ious = aligned_overlaps(det_cls_bboxes[:, None, :4], cls_bboxes[None])
            for det_ind in range(len(det_cls_bboxes)):
                near = ious[det_ind] > 0.01
                pis = (torch.exp(-(1 - ious[det_ind][near])**2 / 0.025)
                       * cls_scores[near])[:, None]
                voted_box = torch.sum(pis * cls_bboxes[near], dim=0) / torch.sum(pis, dim=0)
                voted_bboxes.append(torch.cat((voted_box[None, :],
                                               det_cls_bboxes[det_ind][-1:][None, :]), dim=1))
                voted_labels.append(cls)
        return torch.cat(voted_bboxes, dim=0), det_labels.new_tensor(voted_labels)
