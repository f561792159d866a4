"""mmdet 2.x ``TwoStageDetector``: backbone -> neck -> RPN head -> RoI head.

Keys ``backbone.*``, ``neck.*``, ``rpn_head.*``, ``roi_head.*`` as mmdet, so mmdet 2.x
checkpoints load. The RPN head gets ``train_cfg.rpn`` / ``test_cfg.rpn``, the RoI head
``train_cfg.rcnn`` / ``test_cfg.rcnn``; training proposals are made with
``train_cfg.rpn_proposal`` (``test_cfg.rpn`` when absent).
"""
import warnings

import torch

from ...registry import MODELS, check_keys
from ..utils import build_model_or_sequence
from .base import BaseDetector

__all__ = ['TwoStageDetector']


def _sub(cfg, key):
    return None if cfg is None else cfg.get(key)


@MODELS.register_module()
class TwoStageDetector(BaseDetector):
    """Args as mmdet 2.x: ``backbone``, ``neck``, ``rpn_head``, ``roi_head`` configs;
    ``train_cfg`` (keys ``rpn``, ``rpn_proposal``, ``rcnn``) and ``test_cfg`` (``rpn``,
    ``rcnn``); ``pretrained`` (deprecated) becomes the backbone's
    ``init_cfg=dict(type='Pretrained', checkpoint=pretrained)``.

    Without an ``rpn_head`` the proposals come with the data (``proposals``, as mmdet's
    ``LoadProposals``)."""

    TRAIN_CFG_KEYS = ('rpn', 'rpn_proposal', 'rcnn')
    TEST_CFG_KEYS = ('rpn', 'rcnn')
    TEST_INPUTS = ('proposals', )
    RPN_NEEDS_TEST_CFG = True  # False: an rpn_head that takes no test_cfg.rpn (SparseRCNN)

    def __new__(cls, *args, **kwargs):
        # a dense-head key on a two-stage model (mmdet's objects365 RetinaNet config puts
        # bbox_head on its Faster R-CNN base): say so, rather than Python's "unexpected
        # keyword argument"
        if 'bbox_head' in kwargs:
            raise TypeError(
                f"{cls.__name__} is a two-stage detector (rpn_head + roi_head) and takes no "
                f"bbox_head, the key of a single-stage detector's dense head: the config puts "
                f"a dense head on a two-stage model (e.g. a RetinaNet config on a Faster R-CNN "
                f"_base_; mmdet 2.28.2 cannot build it either). Use a single-stage base "
                f"(type='RetinaNet', ...) or set roi_head.bbox_head instead")
        return super().__new__(cls)

    def __init__(self, backbone, neck=None, rpn_head=None, roi_head=None, train_cfg=None,
                 test_cfg=None, pretrained=None, init_cfg=None):
        super().__init__(init_cfg)
        owner = type(self).__name__
        for name, cfg, keys in (('train_cfg', train_cfg, self.TRAIN_CFG_KEYS),
                                ('test_cfg', test_cfg, self.TEST_CFG_KEYS)):
            if cfg is not None and not isinstance(cfg, dict):
                raise TypeError(f'{owner} {name} must be a dict or None, got {cfg!r}')
            if cfg is not None:
                check_keys(cfg, keys, name, owner=owner)
        if rpn_head is not None and _sub(test_cfg, 'rpn') is None and self.RPN_NEEDS_TEST_CFG:
            raise ValueError(f'{owner} with an rpn_head needs test_cfg.rpn (nms_pre, '
                             f'max_per_img, nms, min_bbox_size), got test_cfg={test_cfg!r}')
        self.backbone = MODELS.build(self._backbone_cfg(backbone, pretrained))
        if neck is not None:
            self.neck = build_model_or_sequence(neck, MODELS)
        if rpn_head is not None:
            self.rpn_head = MODELS.build(dict(rpn_head, train_cfg=_sub(train_cfg, 'rpn'),
                                              test_cfg=_sub(test_cfg, 'rpn')))
            proposal_cfg = _sub(train_cfg, 'rpn_proposal')
            if proposal_cfg is not None and hasattr(self.rpn_head, 'check_proposal_cfg'):
                self.rpn_head.check_proposal_cfg(proposal_cfg, 'train_cfg.rpn_proposal')
        if roi_head is not None:
            # mmdet hands pretrained to the RoI head too (for a shared head's weights)
            self.roi_head = MODELS.build(dict(roi_head, train_cfg=_sub(train_cfg, 'rcnn'),
                                              test_cfg=_sub(test_cfg, 'rcnn'),
                                              pretrained=pretrained))
        self.train_cfg = train_cfg
        self.test_cfg = test_cfg

    @property
    def with_rpn(self):
        return getattr(self, 'rpn_head', None) is not None

    @property
    def with_roi_head(self):
        return getattr(self, 'roi_head', None) is not None

    def _need_roi_head(self, what):
        if not self.with_roi_head:
            raise ValueError(f'{type(self).__name__} needs a roi_head to {what}; an RPN '
                             "alone is type='RPN'")

    def forward_dummy(self, img):
        """The raw outputs of both heads, the RoI head's on 1000 random proposals (mmdet's
        FLOP counting)."""
        self._need_roi_head('run forward_dummy')
        outs = ()
        x = self.extract_feat(img)
        if self.with_rpn:
            outs = outs + (self.rpn_head(x), )
        proposals = torch.randn(1000, 4).to(img.device)
        return outs + (self.roi_head.forward_dummy(x, proposals), )

    def forward_train(self, img, img_metas, gt_bboxes, gt_labels, gt_bboxes_ignore=None,
                      gt_masks=None, proposals=None, **kwargs):
        """The RPN losses (``loss_rpn_cls``, ``loss_rpn_bbox``) and the RoI head's
        (``loss_cls``, ``loss_bbox``, ``acc``, ``loss_mask`` ...).

        Args:
            img (Tensor[B, 3, H, W]): padded batch; img_metas (list[dict]): per image.
            gt_bboxes (list[Tensor[n_i, 4]]), gt_labels (list[Tensor[n_i]]): the boxes and
                their 0-based classes; gt_bboxes_ignore (list[Tensor] | None).
            gt_masks (list[BitmapMasks | PolygonMasks] | None): for a mask head.
            proposals (list[Tensor[k_i, 4 or 5]] | None): the proposals, for a detector
                without an rpn_head (with one, the RPN makes them and these are not used).
            kwargs: other annotations the pipeline collects (``gt_semantic_seg``), passed on
                to the RoI head as mmdet does.
        """
        self._need_roi_head('train')
        if len(img_metas) != img.size(0):
            raise ValueError(f'got {len(img_metas)} img_metas for a batch of {img.size(0)}')
        self._set_batch_input_shape(img, img_metas)
        x = self.extract_feat(img)
        losses = dict()
        if self.with_rpn:
            if proposals is not None:
                warnings.warn(f'{type(self).__name__} has an rpn_head: the proposals in the '
                              'batch are not used (as mmdet 2.x)')
            proposal_cfg = _sub(self.train_cfg, 'rpn_proposal')
            if proposal_cfg is None:
                proposal_cfg = self.test_cfg['rpn']
            rpn_losses, proposal_list = self.rpn_head.forward_train(
                x, img_metas, gt_bboxes, gt_labels=None, gt_bboxes_ignore=gt_bboxes_ignore,
                proposal_cfg=proposal_cfg)
            losses.update(rpn_losses)
        elif proposals is None:
            raise ValueError(f'{type(self).__name__} without an rpn_head needs proposals in '
                             "the batch (LoadProposals and Collect keys=[..., 'proposals'])")
        else:
            proposal_list = proposals
        losses.update(self.roi_head.forward_train(x, img_metas, proposal_list, gt_bboxes,
                                                  gt_labels, gt_bboxes_ignore, gt_masks,
                                                  **kwargs))
        return losses

    def simple_test(self, img, img_metas, proposals=None, rescale=False):
        """The RoI head's results per image: per class ``[k, 5]`` float32 arrays, or
        ``(bbox_results, segm_results)`` with a mask head."""
        if not self.with_bbox:
            raise ValueError(f'{type(self).__name__} needs a roi_head with a bbox_head to test')
        x = self.extract_feat(img)
        if proposals is None:
            if not self.with_rpn:
                raise ValueError(f'{type(self).__name__} without an rpn_head needs proposals')
            proposal_list = self.rpn_head.simple_test_rpn(x, img_metas)
        else:
            proposal_list = proposals
        return self.roi_head.simple_test(x, proposal_list, img_metas, rescale=rescale)

    def aug_test(self, imgs, img_metas, rescale=False):
        """mmdet 2.x test-time augmentation: proposals merged over augmentations
        (``rpn_head.aug_test_rpn``), then the RoI head's ``aug_test``."""
        if not self.with_rpn or not hasattr(self.rpn_head, 'aug_test_rpn'):
            raise NotImplementedError(f'{type(self).__name__} test-time augmentation needs an '
                                      'rpn_head with aug_test_rpn')
        if not hasattr(self.roi_head, 'aug_test'):
            raise NotImplementedError(f'{type(self.roi_head).__name__} has no aug_test: '
                                      f'{type(self).__name__} cannot test with augmentations')
        if any(img.size(0) != 1 for img in imgs):
            raise ValueError(f'aug_test takes one image per augmentation, got batches of '
                             f'{[img.size(0) for img in imgs]}')
        x = self.extract_feats(imgs)
        proposal_list = self.rpn_head.aug_test_rpn(x, img_metas)
        return self.roi_head.aug_test(x, proposal_list, img_metas, rescale=rescale)
