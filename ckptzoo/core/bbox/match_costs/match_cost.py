"""Match costs of mmdet 2.x (``mmdet/core/bbox/match_costs/match_cost.py``): each is called on
predictions of ``num_preds`` queries and ``num_gts`` ground truths and returns the weighted
``[num_preds, num_gts]`` cost (lower is a better match). Arguments and defaults are mmdet's;
bad ones fail naming what is allowed (mmdet asserts). Binary gt masks are taken in the
predictions' dtype (mmdet casts them to float32, so float64 predictions fail there)."""
import torch
import torch.nn.functional as F

from ....registry import TASK_UTILS
from ..transforms import bbox_cxcywh_to_xyxy, bbox_xyxy_to_cxcywh

__all__ = ['BBoxL1Cost', 'FocalLossCost', 'ClassificationCost', 'IoUCost', 'DiceCost',
           'CrossEntropyLossCost', 'build_match_cost', 'pairwise_overlaps']


def build_match_cost(cfg, default_args=None):
    return TASK_UTILS.build(cfg, default_args=default_args)


def pairwise_overlaps(boxes1, boxes2, mode='iou', eps=1e-6):
    """``[N, M]`` IoU / IoF / GIoU of x1y1x2y2 boxes in their own dtype (mmdet's
    ``bbox_overlaps(..., is_aligned=False)``: unions and enclosing areas at least ``eps``)."""
    if mode not in ('iou', 'iof', 'giou'):
        raise ValueError(f"mode must be 'iou', 'iof' or 'giou', got {mode!r}")
    if boxes1.shape[0] == 0 or boxes2.shape[0] == 0:
        return boxes1.new_zeros((boxes1.shape[0], boxes2.shape[0]))
    a, b = boxes1[:, None, :4], boxes2[None, :, :4]
    area1 = (boxes1[:, 2] - boxes1[:, 0]) * (boxes1[:, 3] - boxes1[:, 1])
    area2 = (boxes2[:, 2] - boxes2[:, 0]) * (boxes2[:, 3] - boxes2[:, 1])
    wh = (torch.min(a[..., 2:], b[..., 2:]) - torch.max(a[..., :2], b[..., :2])).clamp(min=0)
    overlap = wh[..., 0] * wh[..., 1]
    union = area1[:, None] if mode == 'iof' else area1[:, None] + area2[None, :] - overlap
    eps_t = union.new_tensor([eps])
    union = torch.max(union, eps_t)
    ious = overlap / union
    if mode != 'giou':
        return ious
    ewh = (torch.max(a[..., 2:], b[..., 2:]) - torch.min(a[..., :2], b[..., :2])).clamp(min=0)
    enclose = torch.max(ewh[..., 0] * ewh[..., 1], eps_t)
    return ious - (enclose - union) / enclose


@TASK_UTILS.register_module()
class BBoxL1Cost:
    """L1 distance of predicted boxes (normalised cx, cy, w, h) to gt boxes (normalised
    x1y1x2y2), compared in ``box_format`` 'xyxy' (the predictions converted) or 'xywh' (the
    gts converted)."""

    def __init__(self, weight=1., box_format='xyxy'):
        if box_format not in ('xyxy', 'xywh'):
            raise ValueError(f"BBoxL1Cost box_format must be 'xyxy' or 'xywh', "
                             f'got {box_format!r}')
        self.weight = weight
        self.box_format = box_format

    def __call__(self, bbox_pred, gt_bboxes):
        if self.box_format == 'xywh':
            gt_bboxes = bbox_xyxy_to_cxcywh(gt_bboxes)
        else:
            bbox_pred = bbox_cxcywh_to_xyxy(bbox_pred)
        return torch.cdist(bbox_pred, gt_bboxes, p=1) * self.weight


@TASK_UTILS.register_module()
class FocalLossCost:
    """Focal loss of the gt class minus that of not predicting it (sigmoid logits
    ``[num_preds, num_classes]`` and labels); ``binary_input``: masks (logits
    ``[num_preds, ...]`` against binary gt masks), averaged over pixels."""

    def __init__(self, weight=1., alpha=0.25, gamma=2, eps=1e-12, binary_input=False):
        self.weight = weight
        self.alpha = alpha
        self.gamma = gamma
        self.eps = eps
        self.binary_input = binary_input

    def _costs(self, cls_pred):
        p = cls_pred.sigmoid()
        neg = -(1 - p + self.eps).log() * (1 - self.alpha) * p.pow(self.gamma)
        pos = -(p + self.eps).log() * self.alpha * (1 - p).pow(self.gamma)
        return pos, neg

    def __call__(self, cls_pred, gt_labels):
        if self.binary_input:
            cls_pred = cls_pred.flatten(1)
            gt = gt_labels.flatten(1).to(cls_pred.dtype)
            pos, neg = self._costs(cls_pred)
            cost = torch.einsum('nc,mc->nm', pos, gt) + torch.einsum('nc,mc->nm', neg, 1 - gt)
            return cost / cls_pred.shape[1] * self.weight
        pos, neg = self._costs(cls_pred)
        return (pos[:, gt_labels] - neg[:, gt_labels]) * self.weight


@TASK_UTILS.register_module()
class ClassificationCost:
    """Minus the softmax probability of the gt class."""

    def __init__(self, weight=1.):
        self.weight = weight

    def __call__(self, cls_pred, gt_labels):
        return -cls_pred.softmax(-1)[:, gt_labels] * self.weight


@TASK_UTILS.register_module()
class IoUCost:
    """Minus the overlap (``iou_mode`` 'iou', 'iof' or 'giou') of x1y1x2y2 boxes."""

    def __init__(self, iou_mode='giou', weight=1.):
        if iou_mode not in ('iou', 'iof', 'giou'):
            raise ValueError(f"IoUCost iou_mode must be 'iou', 'iof' or 'giou', "
                             f'got {iou_mode!r}')
        self.weight = weight
        self.iou_mode = iou_mode

    def __call__(self, bboxes, gt_bboxes):
        return -pairwise_overlaps(bboxes, gt_bboxes, mode=self.iou_mode) * self.weight


@TASK_UTILS.register_module()
class DiceCost:
    """Dice loss of every predicted mask with every gt mask (``pred_act``: sigmoid first;
    ``naive_dice``: denominators are sums, else sums of squares, as V-Net)."""

    def __init__(self, weight=1., pred_act=False, eps=1e-3, naive_dice=True):
        self.weight = weight
        self.pred_act = pred_act
        self.eps = eps
        self.naive_dice = naive_dice

    def binary_mask_dice_loss(self, mask_preds, gt_masks):
        mask_preds = mask_preds.flatten(1)
        gt_masks = gt_masks.flatten(1).to(mask_preds.dtype)
        numerator = 2 * torch.einsum('nc,mc->nm', mask_preds, gt_masks)
        if self.naive_dice:
            denominator = mask_preds.sum(-1)[:, None] + gt_masks.sum(-1)[None, :]
        else:
            denominator = mask_preds.pow(2).sum(1)[:, None] + gt_masks.pow(2).sum(1)[None, :]
        return 1 - (numerator + self.eps) / (denominator + self.eps)

    def __call__(self, mask_preds, gt_masks):
        if self.pred_act:
            mask_preds = mask_preds.sigmoid()
        return self.binary_mask_dice_loss(mask_preds, gt_masks) * self.weight


@TASK_UTILS.register_module()
class CrossEntropyLossCost:
    """Binary cross entropy of every predicted mask (logits) with every gt mask, averaged over
    pixels; only ``use_sigmoid=True`` (as mmdet)."""

    def __init__(self, weight=1., use_sigmoid=True):
        if not use_sigmoid:
            raise NotImplementedError('CrossEntropyLossCost: use_sigmoid=False is not '
                                      'supported (as in mmdet)')
        self.weight = weight
        self.use_sigmoid = use_sigmoid

    def _binary_cross_entropy(self, cls_pred, gt_labels):
        cls_pred = cls_pred.flatten(1).float()
        gt = gt_labels.flatten(1).float()
        pos = F.binary_cross_entropy_with_logits(cls_pred, torch.ones_like(cls_pred),
                                                 reduction='none')
        neg = F.binary_cross_entropy_with_logits(cls_pred, torch.zeros_like(cls_pred),
                                                 reduction='none')
        cost = torch.einsum('nc,mc->nm', pos, gt) + torch.einsum('nc,mc->nm', neg, 1 - gt)
        return cost / cls_pred.shape[1]

    def __call__(self, cls_pred, gt_labels):
        return self._binary_cross_entropy(cls_pred, gt_labels) * self.weight
