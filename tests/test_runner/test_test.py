"""The test loop (``ckptzoo.runner.test``) with a mask model's (bbox, segm) results: drawn with
their masks (``--show-dir``), kept as COCO RLE as mmdet keeps them."""
import os.path as osp

import cv2
import numpy as np
import pycocotools.mask as mask_utils
import torch

from ckptzoo.datasets import StandInDataset, build_dataloader
from ckptzoo.models.detectors.base import BaseDetector
from ckptzoo.runner.test import _original_image, single_gpu_test


class _MaskDetector(BaseDetector):
    """One detection of class 0 per image, its mask a 20 x 30 rectangle; one of class 1 under
    the drawing threshold."""
    CLASSES = ('a', 'b')

    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(1))

    def forward_test(self, img, img_metas=None, rescale=True, **kwargs):
        out = []
        for meta in img_metas:
            h, w = meta['ori_shape'][:2]
            shown, hidden = np.zeros((h, w), bool), np.zeros((h, w), bool)
            shown[10:30, 10:40] = True
            hidden[40:60, 50:70] = True
            out.append(([np.array([[10, 10, 40, 30, 0.9]], np.float32),
                         np.array([[50, 40, 70, 60, 0.1]], np.float32)], [[shown], [hidden]]))
        return out


def test_mask_results_are_drawn_and_kept_as_rle(tmp_path):
    ds = StandInDataset((64, 96), 2, num_samples=2, keys=['img'],
                        meta_keys=('ori_filename', 'ori_shape', 'img_shape', 'img_norm_cfg'))
    loader = build_dataloader(ds, 1, 0, shuffle=False)
    model = _MaskDetector()
    results = single_gpu_test(model, loader, out_dir=str(tmp_path), show_score_thr=0.3)
    assert len(results) == 2
    bbox, segm = results[0]
    assert bbox[0].shape == (1, 5) and isinstance(segm[0][0], dict)
    expected = np.zeros((64, 96), np.uint8)
    expected[10:30, 10:40] = 1
    np.testing.assert_array_equal(mask_utils.decode(segm[0][0]), expected)

    data = next(iter(loader))
    original = _original_image(data['img'][0], data['img_metas'][0])
    drawn = cv2.imread(osp.join(tmp_path, 'stand-in', '000000.jpg'), cv2.IMREAD_UNCHANGED)
    assert drawn.shape == original.shape
    diff = np.abs(drawn.astype(int) - original.astype(int)).max(-1)  # jpeg: a few levels
    assert (diff[14:26, 14:36] > 40).mean() > 0.9  # the mask, blended with its colour
    assert (diff[44:56, 54:66] <= 12).all()  # the mask under score_thr is not drawn
