"""mmdet 2.x ``OHEMSampler`` (Online Hard Example Mining, arXiv:1604.03540): keeps the
candidates with the largest classification loss under the current box head.

The RoI head builds its samplers with ``context=self`` (mmdet's protocol): the sampler runs
``context._bbox_forward`` (with ``context.current_stage`` first for a cascade, whose
``bbox_head`` is then the stage's) on the candidates, without gradients, and ranks them by
``bbox_head.loss(..., reduction_override='none')[loss_key]``. The RoI heads pass ``feats``
(each level's features of the image) to :meth:`sample`.
"""
import torch

from ....registry import TASK_UTILS
from ..transforms import bbox2roi
from .base_sampler import BaseSampler

__all__ = ['OHEMSampler']


@TASK_UTILS.register_module()
class OHEMSampler(BaseSampler):
    """Args (mmdet's): ``num``, ``pos_fraction``, ``context`` (the RoI head), ``neg_pos_ub``,
    ``add_gt_as_proposals``, ``loss_key`` (the loss ranked by, ``'loss_cls'``). Draws no
    random numbers; at capacity it still mines (the forward is part of the step's memory)."""

    def __init__(self, num, pos_fraction, context=None, neg_pos_ub=-1,
                 add_gt_as_proposals=True, loss_key='loss_cls', **kwargs):
        super().__init__(num, pos_fraction, neg_pos_ub, add_gt_as_proposals)
        if context is None or not hasattr(context, 'bbox_head'):
            raise ValueError('OHEMSampler needs context, the RoI head it mines with (built by '
                             f'a RoI head, which passes itself), got {context!r}')
        self.context = context
        self.bbox_head = context.bbox_head[context.current_stage] \
            if hasattr(context, 'num_stages') else context.bbox_head
        self.loss_key = loss_key

    def hard_mining(self, inds, num_expected, bboxes, labels, feats):
        """The ``num_expected`` of ``inds`` whose ``bboxes`` have the largest loss against
        ``labels``."""
        if feats is None:
            raise ValueError('OHEMSampler.sample needs feats=[each level of this image] (the '
                             'RoI heads pass them)')
        with torch.no_grad():
            rois = bbox2roi([bboxes])
            if hasattr(self.context, 'num_stages'):
                results = self.context._bbox_forward(self.context.current_stage, feats, rois)
            else:
                results = self.context._bbox_forward(feats, rois)
            cls_score = results['cls_score']
            loss = self.bbox_head.loss(
                cls_score=cls_score, bbox_pred=None, rois=rois, labels=labels,
                label_weights=cls_score.new_ones(cls_score.size(0)), bbox_targets=None,
                bbox_weights=None, reduction_override='none')[self.loss_key]
            _, top = loss.topk(num_expected)
        return inds[top]

    def _sample_pos(self, assign_result, num_expected, bboxes=None, feats=None, **kwargs):
        pos_inds = torch.nonzero(assign_result.gt_inds > 0, as_tuple=False).flatten()
        if pos_inds.numel() <= num_expected:
            return pos_inds
        return self.hard_mining(pos_inds, num_expected, bboxes[pos_inds],
                                assign_result.labels[pos_inds], feats)

    def _sample_neg(self, assign_result, num_expected, bboxes=None, feats=None, **kwargs):
        neg_inds = torch.nonzero(assign_result.gt_inds == 0, as_tuple=False).flatten()
        if neg_inds.numel() <= num_expected:
            return neg_inds
        labels = assign_result.gt_inds.new_full((neg_inds.numel(), ),
                                                self.bbox_head.num_classes)
        return self.hard_mining(neg_inds, num_expected, bboxes[neg_inds], labels, feats)
