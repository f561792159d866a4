"""mmdet 2.x ``BaseDetector``: what every detector shares beyond :class:`BaseModel`."""
import numpy as np

from ..base import BaseModel

__all__ = ['BaseDetector']


class BaseDetector(BaseModel):
    """Adds ``show_result`` (mmdet 2.x's arguments) to the runner contract."""

    CLASSES = None
    PALETTE = None

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
