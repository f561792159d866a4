"""mmdet 2.x ``TridentFasterRCNN`` (TridentNet, Li et al. 2019): a Faster R-CNN on a
``TridentResNet`` whose branches are, from the RPN on, images of their own: the image metas and
ground truths are repeated per branch (branch-major, as the backbone's batch).

As mmdet, ``forward_train`` passes only boxes and labels on (``gt_bboxes_ignore`` is dropped).
"""
from ...registry import MODELS
from .faster_rcnn import FasterRCNN

__all__ = ['TridentFasterRCNN']


@MODELS.register_module()
class TridentFasterRCNN(FasterRCNN):
    """Args as mmdet 2.x; the backbone's and the RoI head's ``num_branch`` and
    ``test_branch_idx`` must agree."""

    def __init__(self, backbone, rpn_head, roi_head, train_cfg, test_cfg, neck=None,
                 pretrained=None, init_cfg=None):
        super().__init__(backbone=backbone, neck=neck, rpn_head=rpn_head, roi_head=roi_head,
                         train_cfg=train_cfg, test_cfg=test_cfg, pretrained=pretrained,
                         init_cfg=init_cfg)
        for key in ('num_branch', 'test_branch_idx'):
            if getattr(self.backbone, key) != getattr(self.roi_head, key):
                raise ValueError(f'TridentFasterRCNN backbone and roi_head {key} differ: '
                                 f'{getattr(self.backbone, key)} and '
                                 f'{getattr(self.roi_head, key)}')
        self.num_branch = self.backbone.num_branch
        self.test_branch_idx = self.backbone.test_branch_idx

    def _test_branches(self):
        return self.num_branch if self.test_branch_idx == -1 else 1

    def simple_test(self, img, img_metas, proposals=None, rescale=False):
        """Proposals per branch entry, then the RoI head's merged detections per image."""
        if not self.with_bbox:
            raise ValueError('TridentFasterRCNN needs a roi_head with a bbox_head to test')
        x = self.extract_feat(img)
        trident_img_metas = img_metas * self._test_branches()
        if proposals is None:
            proposal_list = self.rpn_head.simple_test_rpn(x, trident_img_metas)
        else:
            proposal_list = proposals
        return self.roi_head.simple_test(x, proposal_list, trident_img_metas, rescale=rescale)

    def aug_test(self, imgs, img_metas, rescale=False):
        """mmdet 2.x's: each augmentation's metas repeated per test branch, so that the RPN
        merges every branch's proposals over the augmentations on its own; then the RoI
        head's ``aug_test`` over the branches."""
        if any(img.size(0) != 1 for img in imgs):
            raise ValueError(f'aug_test takes one image per augmentation, got batches of '
                             f'{[img.size(0) for img in imgs]}')
        x = self.extract_feats(imgs)
        trident_img_metas = [list(metas) * self._test_branches() for metas in img_metas]
        proposal_list = self.rpn_head.aug_test_rpn(x, trident_img_metas)
        return self.roi_head.aug_test(x, proposal_list, img_metas, rescale=rescale)

    def forward_train(self, img, img_metas, gt_bboxes, gt_labels, **kwargs):
        """The losses of every branch: metas, boxes and labels repeated ``num_branch`` times
        (the RPN and RoI head see ``num_branch * B`` images)."""
        if len(img_metas) != img.size(0):
            raise ValueError(f'got {len(img_metas)} img_metas for a batch of {img.size(0)}')
        self._set_batch_input_shape(img, img_metas)
        img_metas = list(img_metas) * self.num_branch
        gt_bboxes = list(gt_bboxes) * self.num_branch
        gt_labels = list(gt_labels) * self.num_branch
        x = self.extract_feat(img)
        proposal_cfg = self.train_cfg.get('rpn_proposal', self.test_cfg['rpn'])
        losses, proposal_list = self.rpn_head.forward_train(
            x, img_metas, gt_bboxes, gt_labels=None, gt_bboxes_ignore=None,
            proposal_cfg=proposal_cfg)
        losses.update(self.roi_head.forward_train(x, img_metas, proposal_list, gt_bboxes,
                                                  gt_labels, None, None))
        return losses
