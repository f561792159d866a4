"""mmdet 2.x ``TridentRoIHead``: a :class:`StandardRoIHead` over TridentNet's branches (each
branch's features are an image of their own); at test each image's detections of every branch
are merged by class-wise NMS (``nms``) and cut to ``max_per_img``.

Fix over mmdet, which leaves a one-image batch (mmdet's test setting) equal: mmdet merged the
consecutive ``num_branch`` entries, which for several images mixes images; here image ``b``'s
branches are the entries ``b, b + B, ...`` (the backbone's branch-major batch). Fix in
test-time augmentation: mmdet scores the first branch's proposals on the first branch's
features ``num_branch`` times; here each branch's proposals are scored on its own features.
Checkpoint units are :class:`StandardRoIHead`'s.
"""
import torch

from ...core.bbox import bbox2result
from ...ops import batched_nms
from ...registry import MODELS
from ...utils.cfg_get import cfg_get
from .standard_roi_head import StandardRoIHead

__all__ = ['TridentRoIHead']


@MODELS.register_module()
class TridentRoIHead(StandardRoIHead):
    """Args: ``num_branch``, ``test_branch_idx`` (-1: every branch at test), then
    :class:`StandardRoIHead`'s."""

    def __init__(self, num_branch, test_branch_idx, **kwargs):
        self.num_branch = num_branch
        self.test_branch_idx = test_branch_idx
        super().__init__(**kwargs)

    def merge_trident_bboxes(self, trident_det_bboxes, trident_det_labels):
        """One image's detections of every branch, class-wise NMS'd, best ``max_per_img``."""
        if trident_det_bboxes.numel() == 0:
            return (trident_det_bboxes.new_zeros((0, 5)),
                    trident_det_bboxes.new_zeros((0, ), dtype=torch.long))
        det_bboxes, keep = batched_nms(trident_det_bboxes[:, :4],
                                       trident_det_bboxes[:, 4].contiguous(),
                                       trident_det_labels, cfg_get(self.test_cfg, 'nms'))
        det_labels = trident_det_labels[keep]
        max_per_img = cfg_get(self.test_cfg, 'max_per_img')
        if max_per_img > 0:
            det_labels = det_labels[:max_per_img]
            det_bboxes = det_bboxes[:max_per_img]
        return det_bboxes, det_labels

    def simple_test(self, x, proposal_list, img_metas, proposals=None, rescale=False):
        """``img_metas`` and ``proposal_list`` hold every branch's entries (branch-major);
        per image, the per-class ``[k, 5]`` arrays of its merged detections."""
        if not self.test_cfg:
            raise ValueError('TridentRoIHead.simple_test needs test_cfg (score_thr, nms, '
                             f'max_per_img), got {self.test_cfg!r}')
        det_bboxes_list, det_labels_list = self.simple_test_bboxes(
            x, img_metas, proposal_list, self.test_cfg, rescale=rescale)
        num_branch = self.num_branch if self.test_branch_idx == -1 else 1
        det_bboxes_list = [d if d.shape[0] else d.new_empty((0, 5)) for d in det_bboxes_list]
        num_imgs = len(img_metas) // num_branch
        results = []
        for i in range(num_imgs):
            det_bboxes, det_labels = self.merge_trident_bboxes(
                torch.cat(det_bboxes_list[i::num_imgs]), torch.cat(det_labels_list[i::num_imgs]))
            results.append(bbox2result(det_bboxes, det_labels, self.bbox_head.num_classes))
        return results

    def aug_test(self, x, proposal_list, img_metas, rescale=False):
        """One image's test-time augmentation: ``proposal_list`` holds each test branch's
        proposals merged over the augmentations (in the original image), ``x`` and
        ``img_metas`` are per augmentation. Returns ``[bbox_results]``, in the original image
        with ``rescale``, else in the first augmentation's scale (as ``StandardRoIHead``)."""
        if not self.test_cfg:
            raise ValueError('TridentRoIHead.aug_test needs test_cfg (score_thr, nms, '
                             f'max_per_img), got {self.test_cfg!r}')
        num_branch = self.num_branch if self.test_branch_idx == -1 else 1
        if len(proposal_list) != num_branch or len(x) != len(img_metas):
            raise ValueError(f'TridentRoIHead.aug_test needs the proposals of each of its '
                             f'{num_branch} test branches and features per augmentation, got '
                             f'{len(proposal_list)} proposal sets, {len(x)} features and '
                             f'{len(img_metas)} img_metas')
        # StandardRoIHead's: proposal set ``b`` pooled from batch entry ``b``, its branch
        det_bboxes, det_labels = self.aug_test_bboxes(x, img_metas, proposal_list,
                                                      self.test_cfg)
        if not rescale:
            det_bboxes = det_bboxes.clone()
            det_bboxes[:, :4] *= det_bboxes.new_tensor(img_metas[0][0]['scale_factor'])
        return [bbox2result(det_bboxes, det_labels, self.bbox_head.num_classes)]
