"""mmdet 2.x ``DistancePointBBoxCoder``: the regression target of anchor-free heads (FCOS,
ATSS-free, GFL, TOOD, YOLOX) is the distance from a point to the box's four sides."""
from ....registry import TASK_UTILS
from ..transforms import bbox2distance, distance2bbox

__all__ = ['DistancePointBBoxCoder']


@TASK_UTILS.register_module()
class DistancePointBBoxCoder:
    """Args:
        clip_border (bool): clip decoded boxes to the image (``max_shape``).
    """

    def __init__(self, clip_border=True):
        self.clip_border = clip_border

    def encode(self, points, gt_bboxes, max_dis=None, eps=0.1):
        """``[n, 2]`` points and ``[n, 4]`` boxes to ``[n, 4]`` distances."""
        if points.size(0) != gt_bboxes.size(0) or points.size(-1) != 2 \
                or gt_bboxes.size(-1) != 4:
            raise ValueError(f'encode needs [n, 2] points and [n, 4] boxes, got '
                             f'{tuple(points.shape)} and {tuple(gt_bboxes.shape)}')
        return bbox2distance(points, gt_bboxes, max_dis, eps)

    def decode(self, points, pred_bboxes, max_shape=None):
        """Points ``[(B,) n, 2]`` and distances ``[(B,) n, 4]`` to boxes."""
        if points.size(0) != pred_bboxes.size(0) or points.size(-1) != 2 \
                or pred_bboxes.size(-1) != 4:
            raise ValueError(f'decode needs [(B,) n, 2] points and [(B,) n, 4] distances, got '
                             f'{tuple(points.shape)} and {tuple(pred_bboxes.shape)}')
        return distance2bbox(points, pred_bboxes, max_shape if self.clip_border else None)
