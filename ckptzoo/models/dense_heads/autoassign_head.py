"""mmdet 2.x ``AutoAssignHead`` (Zhu et al. 2020) and its ``CenterPrior``: no fixed assignment;
every point inside a box is weighted as a positive by its confidence times a learned
per-class Gaussian prior around the box centre, and as a negative by how badly its box
overlaps. Losses ``loss_pos``, ``loss_neg``, ``loss_center``.

The head is an FCOS head with conv biases, points at the cells' corners (offset 0), the
objectness (``conv_centerness``) on the regression tower and distances ``relu(scale * pred)``
in pixels. State-dict keys equal mmdet's (``center_prior.mean``, ``center_prior.sigma`` last).
Checkpoint units: ``level{i}``, as FCOSHead."""
import torch
import torch.nn as nn
import torch.nn.functional as F

from ...core.anchor import MlvlPointGenerator
from ...core.utils import reduce_mean
from ...registry import MODELS
from ...runner.fp16 import force_fp32
from ..losses.iou_loss import aligned_overlaps
from ..utils import bias_init_with_prob, normal_init
from .anchor_free_head import AnchorFreeHead
from .fcos_head import FCOSHead
from .paa_head import levels_to_images

__all__ = ['AutoAssignHead', 'CenterPrior']

EPS = 1e-12


class CenterPrior(nn.Module):
    """A learned Gaussian per class (``mean``, ``sigma`` in strides, ``[num_classes, 2]``) of
    a point's offset from its box centre: each inside point's prior weight for each box.

    Args:
        force_topk (bool): a box with no point inside takes its ``topk`` points of highest
            prior instead.
        topk (int), num_classes (int), strides (tuple[int]).
    """

    def __init__(self, force_topk=False, topk=9, num_classes=80, strides=(8, 16, 32, 64, 128)):
        super().__init__()
        self.mean = nn.Parameter(torch.zeros(num_classes, 2))
        self.sigma = nn.Parameter(torch.ones(num_classes, 2))
        self.strides = strides
        self.force_topk = force_topk
        self.topk = topk

    def forward(self, anchor_points_list, gt_bboxes, labels, inside_gt_bbox_mask):
        """``(weights [P, G], inside mask [P, G])``: the prior of each point for each box,
        zero outside the (possibly top-k widened) mask."""
        inside_gt_bbox_mask = inside_gt_bbox_mask.clone()
        num_points = sum(len(p) for p in anchor_points_list)
        if len(labels) == 0:
            return gt_bboxes.new_zeros(num_points, 0), inside_gt_bbox_mask
        centers = torch.stack(((gt_bboxes[:, 0] + gt_bboxes[:, 2]) / 2,
                               (gt_bboxes[:, 1] + gt_bboxes[:, 3]) / 2), dim=1)[None]
        mean, sigma = self.mean[labels][None], self.sigma[labels][None]
        priors = []
        for points, stride in zip(anchor_points_list, self.strides):
            points = points[:, None, :].expand(points.size(0), len(gt_bboxes), 2)
            distance = ((points - centers) / float(stride) - mean) ** 2
            priors.append(torch.exp(-distance / (2 * sigma ** 2)).prod(dim=-1))
        weights = torch.cat(priors, dim=0)
        if self.force_topk:
            empty = torch.nonzero(inside_gt_bbox_mask.sum(0) == 0).reshape(-1)
            if empty.numel():
                topk = weights[:, empty].topk(self.topk, dim=0)[1]
                inside_gt_bbox_mask[:, empty] = torch.scatter(
                    inside_gt_bbox_mask[:, empty], dim=0, index=topk,
                    src=torch.ones_like(topk, dtype=torch.bool))
        weights[~inside_gt_bbox_mask] = 0
        return weights, inside_gt_bbox_mask


@MODELS.register_module()
class AutoAssignHead(FCOSHead):
    """Args (mmdet's; the rest are :class:`FCOSHead`'s, ``conv_bias`` is always True):
        force_topk (bool), topk (int): see :class:`CenterPrior`.
        pos_loss_weight (float), neg_loss_weight (float), center_loss_weight (float).

    Initialisation as mmdet's ``init_weights``: after the init_cfg, ``conv_cls`` Normal(0.01)
    with the prior-0.02 bias, ``conv_reg`` Normal(0.01) with bias 4.
    """

    def __init__(self, *args, force_topk=False, topk=9, pos_loss_weight=0.25,
                 neg_loss_weight=0.75, center_loss_weight=0.75, **kwargs):
        if kwargs.pop('conv_bias', True) is not True:
            raise ValueError('AutoAssignHead always has conv biases (conv_bias=True)')
        super().__init__(*args, conv_bias=True, **kwargs)
        self.center_prior = CenterPrior(force_topk=force_topk, topk=topk,
                                        num_classes=self.num_classes, strides=self.strides)
        self.pos_loss_weight = pos_loss_weight
        self.neg_loss_weight = neg_loss_weight
        self.center_loss_weight = center_loss_weight
        self.prior_generator = MlvlPointGenerator(self.strides, offset=0)
        normal_init(self.conv_cls, std=0.01, bias=bias_init_with_prob(0.02))
        normal_init(self.conv_reg, std=0.01, bias=4.0)

    def forward_single(self, x, scale, stride):
        """``(cls_score, bbox_pred, objectness)``: distances ``relu(scale * pred) * stride``
        in pixels (training and test), the objectness from the regression tower."""
        cls_score, bbox_pred, _, reg_feat = AnchorFreeHead.forward_single(self, x)
        objectness = self.conv_centerness(reg_feat)
        bbox_pred = scale(bbox_pred)
        if bbox_pred.dtype in (torch.float16, torch.bfloat16):
            bbox_pred = bbox_pred.float()
        return cls_score, bbox_pred.clamp(min=0) * stride, objectness

    def get_pos_loss_single(self, cls_score, objectness, reg_loss, gt_labels,
                            center_prior_weights):
        """One image's positive loss: per box, the BCE against 1 of its points' joint
        probabilities (class x objectness x exp(-reg loss)) averaged with weights
        ``exp(3 p) * prior``. Returns a 1-tuple, as mmdet."""
        p_pos = (cls_score * objectness)[:, gt_labels] * torch.exp(-reg_loss)
        weight = torch.exp(p_pos * 3) * center_prior_weights
        weight = weight / weight.sum(0, keepdim=True).clamp(min=EPS)
        reweighted = (p_pos * weight).sum(0)
        loss = F.binary_cross_entropy(reweighted, torch.ones_like(reweighted),
                                      reduction='none')
        return loss.sum() * self.pos_loss_weight,

    def get_neg_loss_single(self, cls_score, objectness, gt_labels, ious,
                            inside_gt_bbox_mask):
        """One image's negative loss: a focal-style BCE against 0 of every point's joint
        probability, down-weighted inside a box of its class by ``1 - w`` where ``w`` rises
        with the point's best IoU (min-max normalised per box). Returns a 1-tuple."""
        joint = cls_score * objectness
        neg_weight = torch.ones_like(joint)
        if len(gt_labels) > 0:
            inside = inside_gt_bbox_mask.permute(1, 0)
            fg = torch.nonzero(inside, as_tuple=True)
            w = 1 / (1 - ious.permute(1, 0)[fg]).clamp_(EPS)
            for i in range(len(gt_labels)):
                idxs = fg[0] == i
                if idxs.any():
                    x = w[idxs]
                    w[idxs] = (x - x.min() + EPS) / (x.max() - x.min() + EPS)
            neg_weight[fg[1], gt_labels[fg[0]]] = 1 - w
        logits = joint * neg_weight
        loss = logits ** 2 * F.binary_cross_entropy(logits, torch.zeros_like(logits),
                                                    reduction='none')
        return loss.sum() * self.neg_loss_weight,

    @force_fp32(apply_to=('cls_scores', 'bbox_preds', 'objectnesses'))
    def loss(self, cls_scores, bbox_preds, objectnesses, gt_bboxes, gt_labels, img_metas,
             gt_bboxes_ignore=None):
        """mmdet 2.x: ``loss_pos`` over the boxes of the (distributed) batch, ``loss_neg``
        over the sum of the prior weights, ``loss_center`` the mean over images of
        ``num_boxes / sum of prior weights``."""
        if not len(cls_scores) == len(bbox_preds) == len(objectnesses):
            raise ValueError(f'cls_scores, bbox_preds and objectnesses need one entry per '
                             f'level, got {len(cls_scores)}, {len(bbox_preds)} and '
                             f'{len(objectnesses)}')
        all_num_gt = sum(len(b) for b in gt_bboxes)
        featmap_sizes = [f.size()[-2:] for f in cls_scores]
        points = self.prior_generator.grid_priors(featmap_sizes, dtype=bbox_preds[0].dtype,
                                                  device=bbox_preds[0].device)
        inside_list, targets_list = self.get_targets(points, gt_bboxes)
        priors_list, masks = [], []
        for boxes, labels, inside in zip(gt_bboxes, gt_labels, inside_list):
            prior, inside = self.center_prior(points, boxes, labels, inside)
            priors_list.append(prior)
            masks.append(inside)
        inside_list = masks
        flat_points = torch.cat(points, dim=0)
        bbox_preds = levels_to_images(bbox_preds)
        cls_scores = levels_to_images(cls_scores)
        objectnesses = levels_to_images(objectnesses)
        num_points = len(flat_points)
        reg_losses, ious_list = [], []
        for bbox_pred, targets, inside in zip(bbox_preds, targets_list, inside_list):
            num_gt = targets.size(1)
            pts = flat_points[:, None, :].expand(num_points, num_gt, 2).reshape(-1, 2)
            pred = bbox_pred[:, None, :].expand(num_points, num_gt, 4).reshape(-1, 4)
            decoded_pred = self.bbox_coder.decode(pts, pred)
            decoded_target = self.bbox_coder.decode(pts, targets.reshape(-1, 4))
            with torch.no_grad():
                ious = aligned_overlaps(decoded_pred, decoded_target).reshape(num_points,
                                                                              num_gt)
                if num_gt:
                    ious = ious.max(dim=-1, keepdim=True).values.repeat(1, num_gt)
                else:
                    ious = ious.new_zeros(num_points, num_gt)
                ious[~inside] = 0
                ious_list.append(ious)
            loss = self.loss_bbox(decoded_pred, decoded_target, weight=None,
                                  reduction_override='none')
            reg_losses.append(loss.reshape(num_points, num_gt))
        cls_scores = [s.sigmoid() for s in cls_scores]
        objectnesses = [o.sigmoid() for o in objectnesses]

        pos_losses = [self.get_pos_loss_single(*args)[0] for args in zip(
            cls_scores, objectnesses, reg_losses, gt_labels, priors_list)]
        pos_avg_factor = reduce_mean(bbox_preds[-1].new_tensor(all_num_gt)).clamp_(min=1)
        pos_loss = sum(pos_losses) / pos_avg_factor
        neg_losses = [self.get_neg_loss_single(*args)[0] for args in zip(
            cls_scores, objectnesses, gt_labels, ious_list, inside_list)]
        neg_avg_factor = sum(p.data.sum() for p in priors_list)
        neg_avg_factor = reduce_mean(neg_avg_factor).clamp_(min=1)
        neg_loss = sum(neg_losses) / neg_avg_factor

        center_loss = []
        for boxes, prior, inside in zip(gt_bboxes, priors_list, inside_list):
            if inside.any():
                center_loss.append(len(boxes) / prior.sum().clamp_(min=EPS))
            else:
                center_loss.append(prior.sum() * 0)
        center_loss = torch.stack(center_loss).mean() * self.center_loss_weight
        if all_num_gt == 0:  # zeros that keep every prediction and the prior in the graph
            pos_loss = bbox_preds[0].sum() * 0
            center_loss = objectnesses[0].sum() * 0 + (self.center_prior.mean.sum() * 0 +
                                                       self.center_prior.sigma.sum() * 0)
        return dict(loss_pos=pos_loss, loss_neg=neg_loss, loss_center=center_loss)

    def get_targets(self, points, gt_bboxes_list):
        """Per image, ``(inside [P, G] bool, distances [P, G, 4])`` of every point to every
        box (all levels concatenated)."""
        concat_points = torch.cat(points, dim=0)
        out = [self._get_target_single(b, concat_points) for b in gt_bboxes_list]
        return [o[0] for o in out], [o[1] for o in out]

    def _get_target_single(self, gt_bboxes, points):
        num_points, num_gts = points.size(0), gt_bboxes.size(0)
        boxes = gt_bboxes[None].expand(num_points, num_gts, 4)
        xs, ys = points[:, 0, None], points[:, 1, None]
        targets = torch.stack((xs - boxes[..., 0], ys - boxes[..., 1], boxes[..., 2] - xs,
                               boxes[..., 3] - ys), -1)
        if num_gts:
            inside = targets.min(-1)[0] > 0
        else:
            inside = targets.new_zeros((num_points, num_gts), dtype=torch.bool)
        return inside, targets
