"""mmdet 2.x ``ApproxMaxIoUAssigner`` (guided anchoring, SABL): a square anchor is assigned by
the best IoU of its group of *approxes* (the ``approxs_per_octave`` anchors of every scale and
ratio at that position) with each ground truth, then as :class:`MaxIoUAssigner` (whose
degenerate-box fix it inherits)."""
from ....registry import TASK_UTILS
from ..iou_calculators.iou2d_calculator import bbox_overlaps
from .max_iou_assigner import MaxIoUAssigner

__all__ = ['ApproxMaxIoUAssigner']


@TASK_UTILS.register_module()
class ApproxMaxIoUAssigner(MaxIoUAssigner):
    """Arguments and defaults of :class:`MaxIoUAssigner` (mmdet's)."""

    def assign(self, approxs, squares, approxs_per_octave, gt_bboxes, gt_bboxes_ignore=None,
               gt_labels=None):
        """``approxs [n * approxs_per_octave, 4]`` (position-major), ``squares [n, 4]``;
        returns the :class:`AssignResult` of the ``n`` squares. Ignored regions are judged by
        the squares' IoF."""
        if not isinstance(approxs_per_octave, int) or approxs_per_octave < 1:
            raise ValueError(f'approxs_per_octave must be a positive int, got '
                             f'{approxs_per_octave!r}')
        num_squares, num_gts = squares.size(0), gt_bboxes.size(0)
        if approxs.size(0) != num_squares * approxs_per_octave:
            raise ValueError(f'{approxs.size(0)} approxes for {num_squares} squares x '
                             f'{approxs_per_octave} per octave')
        if num_squares == 0 or num_gts == 0:
            return self.assign_wrt_overlaps(approxs.new_zeros(num_gts, num_squares), gt_labels)
        on_cpu = self.gpu_assign_thr > 0 and num_gts > self.gpu_assign_thr
        device = approxs.device
        if on_cpu:
            approxs, squares, gt_bboxes = approxs.cpu(), squares.cpu(), gt_bboxes.cpu()
            gt_bboxes_ignore = None if gt_bboxes_ignore is None else gt_bboxes_ignore.cpu()
            gt_labels = None if gt_labels is None else gt_labels.cpu()
        # [approxs_per_octave * n] in octave-major order, as mmdet computes the IoUs
        approxs = approxs.view(num_squares, approxs_per_octave, 4).transpose(0, 1)
        all_overlaps = bbox_overlaps(approxs.reshape(-1, 4), gt_bboxes)
        overlaps = all_overlaps.view(approxs_per_octave, num_squares, num_gts).max(dim=0)[0]
        overlaps = overlaps.t()
        if (self.ignore_iof_thr > 0 and gt_bboxes_ignore is not None
                and gt_bboxes_ignore.numel() > 0 and squares.numel() > 0):
            if self.ignore_wrt_candidates:
                ignore = bbox_overlaps(squares, gt_bboxes_ignore, mode='iof').max(dim=1)[0]
            else:
                ignore = bbox_overlaps(gt_bboxes_ignore, squares, mode='iof').max(dim=0)[0]
            overlaps[:, ignore > self.ignore_iof_thr] = -1
        result = self.assign_wrt_overlaps(overlaps, gt_labels)
        if on_cpu:
            result.gt_inds = result.gt_inds.to(device)
            result.max_overlaps = result.max_overlaps.to(device)
            if result.labels is not None:
                result.labels = result.labels.to(device)
        return result
