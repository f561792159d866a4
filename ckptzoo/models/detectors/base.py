"""mmdet 2.x ``BaseDetector``: what every detector shares beyond :class:`BaseModel`."""
import warnings

import numpy as np
import torch

from ...runner.fp16 import auto_fp16
from ..base import BaseModel

__all__ = ['BaseDetector']


class BaseDetector(BaseModel):
    """Features (``extract_feat``), the test-input dispatch (``forward_test``) and
    ``show_result`` (mmdet 2.x's arguments) on top of the runner contract.

    ``TEST_INPUTS``: the extra test inputs ``simple_test`` takes (a two-stage detector's
    ``proposals``); any other key fails."""

    CLASSES = None
    PALETTE = None
    TEST_INPUTS = ()

    @staticmethod
    def _backbone_cfg(backbone, pretrained):
        """mmdet 2.x's deprecated ``pretrained`` as the backbone's ``init_cfg``."""
        if not pretrained:
            return backbone
        warnings.warn('pretrained is deprecated, use backbone init_cfg=dict('
                      "type='Pretrained', checkpoint=...)", DeprecationWarning)
        return dict(backbone, init_cfg=dict(type='Pretrained', checkpoint=pretrained))

    @auto_fp16(apply_to=('img', ))
    def forward(self, img, img_metas, return_loss=True, **kwargs):
        """mmdet 2.x's signature: ``img_metas`` is the second positional argument
        (``model(img, img_metas, return_loss=False)``), before ``return_loss``."""
        if return_loss:
            return self.forward_train(img, img_metas, **kwargs)
        return self.forward_test(img, img_metas, **kwargs)

    @property
    def with_neck(self):
        return getattr(self, 'neck', None) is not None

    @property
    def with_shared_head(self):
        return getattr(self, 'roi_head', None) is not None and \
            bool(getattr(self.roi_head, 'with_shared_head', False))

    @property
    def with_bbox(self):
        roi_head = getattr(self, 'roi_head', None)
        return (roi_head is not None and bool(getattr(roi_head, 'with_bbox', False))) or \
            getattr(self, 'bbox_head', None) is not None

    @property
    def with_mask(self):
        roi_head = getattr(self, 'roi_head', None)
        return (roi_head is not None and bool(getattr(roi_head, 'with_mask', False))) or \
            getattr(self, 'mask_head', None) is not None

    def extract_feat(self, img):
        """Backbone features, through the neck when there is one."""
        x = self.backbone(img)
        return self.neck(x) if self.with_neck else x

    def extract_feats(self, imgs):
        """``extract_feat`` of each augmentation of a list."""
        if not isinstance(imgs, (list, tuple)):
            raise TypeError(f'extract_feats takes a list of image batches, got {type(imgs)}')
        return [self.extract_feat(img) for img in imgs]

    @staticmethod
    def _set_batch_input_shape(img, img_metas):
        shape = tuple(img.size()[-2:])
        for meta in img_metas:
            meta['batch_input_shape'] = shape

    def simple_test(self, img, img_metas, **kwargs):
        raise NotImplementedError(f'{type(self).__name__} implements no simple_test')

    def aug_test(self, imgs, img_metas, **kwargs):
        raise NotImplementedError(f'{type(self).__name__} has no test-time augmentation')

    def forward_test(self, img, img_metas, rescale=True, **kwargs):
        """``img`` a Tensor with ``img_metas`` a list of dicts, or (mmdet 2.x test pipelines)
        a list over augmentations of Tensors with ``img_metas`` a list of lists of dicts.
        Extra inputs (``TEST_INPUTS``) come per augmentation in the second form, as mmdet;
        only one augmentation may have them."""
        if isinstance(img, torch.Tensor):
            imgs, metas = [img], [img_metas]
            kwargs = {k: [v] for k, v in kwargs.items()}
        elif isinstance(img, (list, tuple)):
            imgs, metas = list(img), list(img_metas)
        else:
            raise TypeError(f'img must be a Tensor or a list of Tensors, got {type(img)}')
        if len(imgs) != len(metas) or any(not isinstance(m, (list, tuple)) for m in metas):
            raise ValueError(f'img_metas must be a list of dicts per image (or one such list '
                             f'per augmentation); got {len(imgs)} augmentations of img and '
                             f'{len(metas)} of img_metas')
        for aug_img, aug_metas in zip(imgs, metas):
            if len(aug_metas) != aug_img.size(0):
                raise ValueError(f'got {len(aug_metas)} img_metas for a batch of '
                                 f'{aug_img.size(0)} images')
            self._set_batch_input_shape(aug_img, aug_metas)
        unexpected = sorted(k for k in kwargs if k not in self.TEST_INPUTS)
        if unexpected:
            raise TypeError(f'unexpected test inputs {unexpected}' + (
                f'; {type(self).__name__} takes {list(self.TEST_INPUTS)}'
                if self.TEST_INPUTS else ''))
        if len(imgs) == 1:
            return self.simple_test(imgs[0], metas[0], rescale=rescale,
                                    **{k: v[0] for k, v in kwargs.items()})
        if kwargs:
            raise ValueError(f'{sorted(kwargs)} cannot be given with test-time augmentation '
                             f'({len(imgs)} augmentations)')
        return self.aug_test(imgs, metas, rescale=rescale)

    def show_result(self, img, result, score_thr=0.3, bbox_color=None, text_color=None,
                    mask_color=None, thickness=2, font_size=13, win_name='', show=False,
                    wait_time=0, out_file=None):
        """Draw ``result`` (a list over classes of ``(k, 5)`` arrays, as ``simple_test`` and
        :func:`ckptzoo.apis.inference_detector` return, or a ``(bbox_result, segm_result)``
        pair of a mask model, ``segm_result`` a list over classes of masks, one per box) on
        ``img`` (a path or a BGR array).

        Boxes (and their masks) scoring at most ``score_thr`` are left out; class names come
        from ``self.CLASSES``; colours default to one per class (``self.PALETTE`` if set), for
        masks too. Writes ``out_file`` when given; returns the drawn BGR image when neither
        ``show`` nor ``out_file`` is set (as mmdet).
        """
        from ...visualization import imshow_det_bboxes
        segm_result = None
        if isinstance(result, tuple):
            bbox_result, segm_result = result
            if isinstance(segm_result, tuple):  # (segms, mask scores): mask scoring
                segm_result = segm_result[0]
        else:
            bbox_result = result
        if not isinstance(bbox_result, (list, tuple)):
            raise TypeError('result must be a list over classes of (k, 5) arrays, got '
                            f'{type(bbox_result).__name__}')
        bbox_result = [np.asarray(b, dtype=np.float32).reshape(-1, 5) for b in bbox_result]
        bboxes = np.vstack(bbox_result) if bbox_result else np.zeros((0, 5), np.float32)
        labels = np.concatenate([np.full(b.shape[0], i, dtype=np.int64)
                                 for i, b in enumerate(bbox_result)]) if bbox_result \
            else np.zeros((0,), np.int64)
        segms = None
        if segm_result is not None and len(labels):
            segms = [m for cls_segms in segm_result for m in cls_segms]
            if len(segms) != len(labels):
                raise ValueError(f'segm_result holds {len(segms)} masks for {len(labels)} '
                                 f'boxes; a mask model gives one per box')
        if bbox_color is None and self.PALETTE is not None:
            bbox_color = list(self.PALETTE)
        if mask_color is None and self.PALETTE is not None:
            mask_color = list(self.PALETTE)
        if out_file is not None:
            show = False
        img = imshow_det_bboxes(img, bboxes, labels, segms, class_names=self.CLASSES,
                                score_thr=score_thr, bbox_color=bbox_color,
                                text_color=text_color, mask_color=mask_color,
                                thickness=thickness, font_size=font_size, win_name=win_name,
                                show=show, wait_time=wait_time, out_file=out_file)
        if not (show or out_file):
            return img
        return None
