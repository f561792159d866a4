"""mmdet 2.x ``RPN``: a proposal-only detector (backbone -> neck -> RPNHead).

Keys ``backbone.*``, ``neck.*``, ``rpn_head.*`` as mmdet. Trained on boxes alone (no labels);
tested, it returns per image the proposals as a ``[k, 5]`` float32 array
(x1, y1, x2, y2, score), the format of mmdet's proposal files and recall evaluation.
"""
import numpy as np

from ...core.bbox import bbox_mapping
from ...registry import MODELS, check_keys
from ..utils import build_model_or_sequence
from .base import BaseDetector

__all__ = ['RPN']


@MODELS.register_module()
class RPN(BaseDetector):
    """Args as mmdet 2.x: ``rpn_head`` gets ``train_cfg.rpn`` and ``test_cfg.rpn``;
    ``pretrained`` (deprecated) becomes the backbone's ``init_cfg``."""

    def __init__(self, backbone, neck, rpn_head, train_cfg, test_cfg, pretrained=None,
                 init_cfg=None):
        super().__init__(init_cfg)
        if train_cfg is not None:
            check_keys(train_cfg, ('rpn', ), 'train_cfg', owner='RPN')
        if not isinstance(test_cfg, dict) or test_cfg.get('rpn') is None:
            raise ValueError(f'RPN needs test_cfg=dict(rpn=dict(nms_pre=..., max_per_img=..., '
                             f'nms=..., min_bbox_size=...)), got {test_cfg!r}')
        check_keys(test_cfg, ('rpn', ), 'test_cfg', owner='RPN')
        self.backbone = MODELS.build(self._backbone_cfg(backbone, pretrained))
        self.neck = build_model_or_sequence(neck, MODELS) if neck is not None else None
        self.rpn_head = MODELS.build(dict(
            rpn_head, train_cfg=None if train_cfg is None else train_cfg.get('rpn'),
            test_cfg=test_cfg['rpn']))
        self.train_cfg = train_cfg
        self.test_cfg = test_cfg

    def forward_dummy(self, img):
        """The raw RPN head outputs (for FLOP counting)."""
        return self.rpn_head(self.extract_feat(img))

    def forward_train(self, img, img_metas, gt_bboxes=None, gt_bboxes_ignore=None):
        """``dict(loss_rpn_cls=[per level], loss_rpn_bbox=[per level])``; boxes only (an RPN
        pipeline collects no labels)."""
        if gt_bboxes is None:
            raise ValueError("RPN training needs gt_bboxes (Collect keys=['img', "
                             "'gt_bboxes'])")
        if len(img_metas) != img.size(0):
            raise ValueError(f'got {len(img_metas)} img_metas for a batch of {img.size(0)}')
        self._set_batch_input_shape(img, img_metas)
        x = self.extract_feat(img)
        return self.rpn_head.forward_train(x, img_metas, gt_bboxes, None, gt_bboxes_ignore)

    def simple_test(self, img, img_metas, rescale=False):
        """Per image a float32 ``[k, 5]`` array of proposals, in the original image's
        coordinates when ``rescale`` (divided by ``scale_factor``)."""
        proposal_list = self.rpn_head.simple_test_rpn(self.extract_feat(img), img_metas)
        if rescale:
            for proposals, meta in zip(proposal_list, img_metas):
                proposals[:, :4] /= proposals.new_tensor(meta['scale_factor'])
        return [p.detach().float().cpu().numpy() for p in proposal_list]

    def aug_test(self, imgs, img_metas, rescale=False):
        """Proposals merged over augmentations (``rpn_head.aug_test_rpn``); without
        ``rescale`` mapped into the first augmentation's image, as mmdet."""
        proposal_list = self.rpn_head.aug_test_rpn(self.extract_feats(imgs), img_metas)
        if not rescale:
            for proposals, meta in zip(proposal_list, img_metas[0]):
                proposals[:, :4] = bbox_mapping(proposals[:, :4], meta['img_shape'],
                                                meta['scale_factor'], meta.get('flip', False),
                                                meta.get('flip_direction') or 'horizontal')
        return [p.detach().float().cpu().numpy() for p in proposal_list]

    def show_result(self, img, result, top_k=20, bbox_color='green', thickness=2, win_name='',
                    show=False, wait_time=0, out_file=None, **kwargs):
        """Draw the ``top_k`` best proposals of ``result`` (a ``[k, 5]`` array; all when
        ``top_k <= 0``) on ``img``; returns the drawn image unless shown or written."""
        from ...visualization import imshow_det_bboxes
        bboxes = np.asarray(result, dtype=np.float32).reshape(-1, 5)
        if top_k > 0:
            bboxes = bboxes[:top_k]
        drawn = imshow_det_bboxes(img, bboxes, np.zeros(len(bboxes), np.int64),
                                  class_names=('proposal', ), bbox_color=bbox_color,
                                  thickness=thickness, win_name=win_name,
                                  show=show and out_file is None, wait_time=wait_time,
                                  out_file=out_file, **kwargs)
        return None if (show or out_file) else drawn
