"""mmdet 2.x ``CombinedSampler``: positives from one sampler, negatives from another (Libra
R-CNN: ``InstanceBalancedPosSampler`` with ``IoUBalancedNegSampler``)."""
from ....registry import TASK_UTILS
from .base_sampler import BaseSampler

__all__ = ['CombinedSampler']


@TASK_UTILS.register_module()
class CombinedSampler(BaseSampler):
    """Args (mmdet's): ``pos_sampler``, ``neg_sampler`` (configs, built with this sampler's
    other arguments as defaults: ``num``, ``pos_fraction``, ``neg_pos_ub``,
    ``add_gt_as_proposals``, ``context``). Its ``at_capacity`` holds for both while it
    samples."""

    def __init__(self, pos_sampler, neg_sampler, **kwargs):
        super().__init__(**kwargs)
        self.pos_sampler = TASK_UTILS.build(pos_sampler, default_args=kwargs)
        self.neg_sampler = TASK_UTILS.build(neg_sampler, default_args=kwargs)

    def sample(self, assign_result, bboxes, gt_bboxes, gt_labels=None, **kwargs):
        children = (self.pos_sampler, self.neg_sampler)
        before = [child.at_capacity for child in children]
        for child in children:
            child.at_capacity = self.at_capacity
        try:
            return super().sample(assign_result, bboxes, gt_bboxes, gt_labels, **kwargs)
        finally:
            for child, flag in zip(children, before):
                child.at_capacity = flag
