"""mmdet 2.x ``FreeAnchorRetinaHead`` (Zhang et al. 2019, FreeAnchor): RetinaHead's layers
(same state-dict keys, same ``level{i}`` checkpoint units) trained by maximum-likelihood
matching instead of IoU assignment: each ground truth picks a bag of its ``pre_anchor_topk``
best-IoU anchors (positive bag loss, a mean-max of classification x localisation
probability), and every anchor's classification is pushed to background by how unlikely it is
to localise an object of that class (negative bag loss, a focal-style term)."""
import torch
import torch.nn.functional as F

from ...core.bbox import bbox_overlaps
from ...registry import MODELS
from ...runner.fp16 import force_fp32
from .retina_head import RetinaHead

__all__ = ['FreeAnchorRetinaHead']

EPS = 1e-12


@MODELS.register_module()
class FreeAnchorRetinaHead(RetinaHead):
    """FreeAnchor RetinaHead.

    Args:
        num_classes, in_channels, stacked_convs, conv_cfg, norm_cfg: as :class:`RetinaHead`.
        pre_anchor_topk (int): anchors in each object's bag.
        bbox_thr (float): IoU where the saturated linear localisation probability starts.
        gamma (float): focal exponent of the negative bag loss.
        alpha (float): weight of the positive bag loss (``1 - alpha``: the negative one).
        **kwargs: :class:`RetinaHead` / :class:`AnchorHead` arguments.

    The losses run in float32 under fp16 (mmdet's override of ``loss`` lost the
    ``force_fp32`` of AnchorHead's).
    """

    def __init__(self, num_classes, in_channels, stacked_convs=4, conv_cfg=None, norm_cfg=None,
                 pre_anchor_topk=50, bbox_thr=0.6, gamma=2.0, alpha=0.5, **kwargs):
        if not (isinstance(pre_anchor_topk, int) and pre_anchor_topk > 0):
            raise ValueError(f'pre_anchor_topk must be a positive int, got {pre_anchor_topk!r}')
        super().__init__(num_classes, in_channels, stacked_convs, conv_cfg, norm_cfg, **kwargs)
        if not self.use_sigmoid_cls:
            raise ValueError('FreeAnchorRetinaHead needs a sigmoid classification '
                             '(loss_cls use_sigmoid=True)')
        self.pre_anchor_topk = pre_anchor_topk
        self.bbox_thr = bbox_thr
        self.gamma = gamma
        self.alpha = alpha

    def _image_box_prob(self, anchors, bbox_preds, gt_bboxes, gt_labels):
        """``P{a_j in A+}`` per anchor and class ``[num_anchors, C]``: per class, the largest
        saturated-linear IoU probability over that class's objects (mmdet's sparse max)."""
        if len(gt_bboxes) == 0:
            return bbox_preds.new_zeros(anchors.size(0), self.cls_out_channels)
        pred_boxes = self.bbox_coder.decode(anchors, bbox_preds)
        object_box_iou = bbox_overlaps(gt_bboxes, pred_boxes)
        t1 = self.bbox_thr
        t2 = object_box_iou.max(dim=1, keepdim=True).values.clamp(min=t1 + 1e-12)
        object_box_prob = ((object_box_iou - t1) / (t2 - t1)).clamp(min=0, max=1)
        per_class = object_box_prob.new_zeros(self.cls_out_channels, anchors.size(0))
        index = gt_labels.long()[:, None].expand_as(object_box_prob)
        per_class = per_class.scatter_reduce(0, index, object_box_prob, reduce='amax')
        return per_class.t()

    @force_fp32(apply_to=('cls_scores', 'bbox_preds'))
    def loss(self, cls_scores, bbox_preds, gt_bboxes, gt_labels, img_metas,
             gt_bboxes_ignore=None):
        """``dict(positive_bag_loss, negative_bag_loss)``; ``gt_bboxes_ignore`` is unused,
        as mmdet."""
        featmap_sizes = [f.size()[-2:] for f in cls_scores]
        if len(featmap_sizes) != self.prior_generator.num_levels:
            raise ValueError(f'got {len(featmap_sizes)} feature levels, the anchor generator '
                             f'has {self.prior_generator.num_levels} strides')
        anchor_list, _ = self.get_anchors(featmap_sizes, img_metas, cls_scores[0].device)
        anchors = [torch.cat(a) for a in anchor_list]
        cls_scores = torch.cat([c.permute(0, 2, 3, 1).reshape(c.size(0), -1,
                                                                self.cls_out_channels)
                                for c in cls_scores], dim=1)
        bbox_preds = torch.cat([b.permute(0, 2, 3, 1).reshape(b.size(0), -1, 4)
                                for b in bbox_preds], dim=1)
        cls_prob = torch.sigmoid(cls_scores)
        box_prob, positive_losses, num_pos = [], [], 0
        for anchors_, labels_, bboxes_, cls_prob_, preds_ in zip(anchors, gt_labels, gt_bboxes,
                                                                 cls_prob, bbox_preds):
            with torch.no_grad():
                box_prob.append(self._image_box_prob(anchors_, preds_, bboxes_, labels_))
            # each object's bag: its pre_anchor_topk best anchors by IoU
            _, matched = torch.topk(bbox_overlaps(bboxes_, anchors_), self.pre_anchor_topk,
                                    dim=1, sorted=False)
            matched_cls_prob = torch.gather(
                cls_prob_[matched], 2,
                labels_.view(-1, 1, 1).repeat(1, self.pre_anchor_topk, 1)).squeeze(2)
            matched_anchors = anchors_[matched]
            targets = self.bbox_coder.encode(
                matched_anchors, bboxes_.unsqueeze(dim=1).expand_as(matched_anchors))
            loss_bbox = self.loss_bbox(preds_[matched], targets,
                                       reduction_override='none').sum(-1)
            num_pos += len(bboxes_)
            positive_losses.append(self.positive_bag_loss(matched_cls_prob,
                                                          torch.exp(-loss_bbox)))
        positive_loss = torch.cat(positive_losses).sum() / max(1, num_pos)
        negative_loss = self.negative_bag_loss(cls_prob, torch.stack(box_prob)).sum() / max(
            1, num_pos * self.pre_anchor_topk)
        if num_pos == 0:  # the regression branch still gets (zero) gradients
            positive_loss = bbox_preds.sum() * 0
        return dict(positive_bag_loss=positive_loss, negative_bag_loss=negative_loss)

    def positive_bag_loss(self, matched_cls_prob, matched_box_prob):
        """``alpha * -log(mean-max(P_cls * P_loc))`` per object ``[num_gt]``."""
        matched_prob = matched_cls_prob * matched_box_prob
        weight = 1 / torch.clamp(1 - matched_prob, 1e-12, None)
        weight /= weight.sum(dim=1).unsqueeze(dim=-1)
        bag_prob = (weight * matched_prob).sum(dim=1)
        return self.alpha * F.binary_cross_entropy(bag_prob, torch.ones_like(bag_prob),
                                                   reduction='none')

    def negative_bag_loss(self, cls_prob, box_prob):
        """``(1 - alpha) * FL((1 - P{a in A+}) * P_cls)`` per image, anchor and class."""
        prob = (cls_prob * (1 - box_prob)).clamp(min=EPS, max=1 - EPS)
        loss = prob**self.gamma * F.binary_cross_entropy(prob, torch.zeros_like(prob),
                                                         reduction='none')
        return (1 - self.alpha) * loss
