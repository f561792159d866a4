"""mmdet 2.x PISA (Cao et al. 2020, Prime Sample Attention) reweighting: ``isr_p``, the
importance-based reweighting of the positives' classification loss, and ``carl_loss``, the
classification-aware regression loss."""
import torch

__all__ = ['isr_p', 'carl_loss']


def _aligned_iou(boxes1, boxes2, eps=1e-6):
    """IoU of each pair ``boxes1[i]``, ``boxes2[i]`` (mmdet's ``is_aligned=True``)."""
    lt = torch.max(boxes1[:, :2], boxes2[:, :2])
    rb = torch.min(boxes1[:, 2:], boxes2[:, 2:])
    wh = (rb - lt).clamp(min=0)
    overlap = wh[:, 0] * wh[:, 1]
    area1 = (boxes1[:, 2] - boxes1[:, 0]) * (boxes1[:, 3] - boxes1[:, 1])
    area2 = (boxes2[:, 2] - boxes2[:, 0]) * (boxes2[:, 3] - boxes2[:, 1])
    return overlap / torch.clamp(area1 + area2 - overlap, min=eps)


def _pos_deltas(bbox_pred, inds, labels):
    if bbox_pred.size(-1) > 4:
        return bbox_pred.view(bbox_pred.size(0), -1, 4)[inds, labels].view(-1, 4)
    return bbox_pred[inds].view(-1, 4)


def isr_p(cls_score, bbox_pred, bbox_targets, rois, sampling_results, loss_cls, bbox_coder,
          k=2, bias=0, num_class=80):
    """ISR-P: the positives' label weights by their IoU rank (IoU-HLR: first within each
    ground truth, then within each class), mapped by ``(bias + w * (1 - bias)) ** k`` and
    rescaled so that the positives' classification loss keeps its sum. Scores and deltas are
    detached: the weights take no gradient.

    Args: ``bbox_targets`` ``(labels, label_weights, bbox_targets, bbox_weights)`` (the label
    weights are changed in place, as mmdet); ``rois`` ``[n, 5]`` or anchors ``[n, 4]``;
    ``loss_cls`` the head's classification loss, ``bbox_coder`` its coder.
    Returns the four targets with the new label weights."""
    labels, label_weights, targets, bbox_weights = bbox_targets
    pos_inds = ((labels >= 0) & (labels < num_class)).nonzero().reshape(-1)
    pos_labels = labels[pos_inds]
    num_pos = pos_inds.numel()
    if num_pos == 0:
        return labels, label_weights, targets, bbox_weights
    gts, offset = [], 0
    for res in sampling_results:  # ground-truth indices unique over the batch
        gt_i = res.pos_assigned_gt_inds
        gts.append(gt_i + offset)
        if len(gt_i):
            offset = gt_i.max() + 1
    gts = torch.cat(gts)
    if len(gts) != num_pos:
        raise ValueError(f'isr_p: {num_pos} positive labels but {len(gts)} positives in the '
                         f'sampling results')
    cls_score = cls_score.detach()
    bbox_pred = bbox_pred.detach()
    pos_rois = rois[pos_inds][:, 1:] if rois.size(-1) == 5 else rois[pos_inds]
    pos_bbox = bbox_coder.decode(pos_rois, _pos_deltas(bbox_pred, pos_inds, pos_labels))
    target_bbox = bbox_coder.decode(pos_rois, targets[pos_inds].view(-1, 4))
    ious = _aligned_iou(pos_bbox, target_bbox)
    pos_imp_weights = label_weights[pos_inds]
    max_l_num = pos_labels.bincount().max()
    for label in pos_labels.unique():
        l_inds = (pos_labels == label).nonzero().view(-1)
        l_gts = gts[l_inds]
        for t in l_gts.unique():  # rank within the ground truth, ahead of the class rank
            t_inds = l_inds[l_gts == t]
            rank = ious[t_inds].sort(descending=True)[1].sort()[1]
            ious[t_inds] += max_l_num - rank.float()
        rank = ious[l_inds].sort(descending=True)[1].sort()[1]
        pos_imp_weights[l_inds] *= (max_l_num - rank.float()) / max_l_num
    pos_imp_weights = (bias + pos_imp_weights * (1 - bias)).pow(k)
    pos_loss_cls = loss_cls(cls_score[pos_inds], pos_labels, reduction_override='none')
    ori_weights, new_weights = label_weights[pos_inds], pos_imp_weights
    if pos_loss_cls.dim() > 1:
        ori_weights, new_weights = ori_weights[:, None], new_weights[:, None]
    ratio = (pos_loss_cls * ori_weights).sum() / (pos_loss_cls * new_weights).sum()
    label_weights[pos_inds] = pos_imp_weights * ratio
    return labels, label_weights, targets, bbox_weights


def carl_loss(cls_score, labels, bbox_pred, bbox_targets, loss_bbox, k=1, bias=0.2,
              avg_factor=None, sigmoid=False, num_class=80):
    """CARL: the positives' regression loss weighted by ``(bias + (1 - bias) * p) ** k`` of
    their class probability ``p`` (softmax, or sigmoid), the weights normalised to a mean of
    1, summed and divided by ``avg_factor`` (default: all RoIs). The gradient reaches the
    scores through the weights. Returns ``dict(loss_carl=Tensor[1])``."""
    pos_inds = ((labels >= 0) & (labels < num_class)).nonzero().reshape(-1)
    if pos_inds.numel() == 0:
        return dict(loss_carl=cls_score.sum()[None] * 0.)
    pos_labels = labels[pos_inds]
    probs = cls_score.sigmoid() if sigmoid else cls_score.softmax(-1)
    weights = (bias + (1 - bias) * probs[pos_inds, pos_labels]).pow(k)
    weights = weights * (float(pos_inds.numel()) / weights.sum())
    if avg_factor is None:
        avg_factor = bbox_targets.size(0)
    pos_bbox_preds = bbox_pred.view(bbox_pred.size(0), -1, 4)[pos_inds, pos_labels] \
        if bbox_pred.size(-1) > 4 else bbox_pred[pos_inds]
    loss_reg = loss_bbox(pos_bbox_preds, bbox_targets[pos_inds],
                         reduction_override='none') / avg_factor
    return dict(loss_carl=(loss_reg * weights[:, None]).sum()[None])
