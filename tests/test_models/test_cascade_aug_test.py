"""Test-time augmentation of the cascades (Cascade Mask R-CNN, HTC, SCNet): on one view and the
same proposals the RoI head's ``aug_test`` equals its ``simple_test``; a flipped pair of views gives the mirrored result for the mirrored image, which
holds only if each view's boxes and masks are mapped back before they are merged."""
import copy

import numpy as np
import pytest
import torch

from ckptzoo.registry import build_detector
from tests.helpers.checkpointing import one_thread
from tests.helpers.coco_tta import ORI_SHAPE, flip_aug_batch, swapped_views
from tests.helpers.detectors import cascade_cfg, htc_cfg
from tests.helpers.scnet import scnet_cfg

one_thread = pytest.fixture(autouse=True)(one_thread)

CONFIGS = {
    'cascade': lambda: cascade_cfg(),
    'htc': lambda: htc_cfg(),
    'htc_no_info_flow': lambda: htc_cfg(with_semantic=False, mask_info_flow=False),
    'scnet': lambda: scnet_cfg(),
}


def _model(name):
    torch.manual_seed(0)
    cfg = CONFIGS[name]()
    model = build_detector(cfg).eval()
    for head in model.roi_head.bbox_head:  # decisive scores: no near-ties for NMS to break
        head.fc_cls.weight.data.mul_(30)
    return model


def _masks_differ(a, b):
    return sum(int((x != y).sum()) for seg_a, seg_b in zip(a, b) for x, y in zip(seg_a, seg_b))


@pytest.mark.parametrize('name', list(CONFIGS))
def test_one_view_equals_simple_test(tmp_path, name):
    model = _model(name)
    batch = flip_aug_batch(tmp_path)
    img, metas = batch['img'][0], batch['img_metas'][0]
    with torch.no_grad():
        x = model.extract_feat(img)
        proposals = model.rpn_head.simple_test_rpn(x, metas)
        (boxes, masks), = model.roi_head.simple_test(x, proposals, metas, rescale=True)
        # aug_test takes proposals in the original image, as aug_test_rpn merges them
        original = proposals[0].clone()
        original[:, :4] /= original.new_tensor(metas[0]['scale_factor'])
        (aug_boxes, aug_masks), = model.roi_head.aug_test([x], [original], [metas],
                                                          rescale=True)
    assert sum(len(b) for b in boxes) > 0
    for a, b in zip(boxes, aug_boxes):
        np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-4)
    assert _masks_differ(masks, aug_masks) == 0


@pytest.mark.parametrize('name', list(CONFIGS))
def test_flipped_views_are_mapped_back(tmp_path, name):
    model = _model(name)
    batch = flip_aug_batch(tmp_path)
    h, w = ORI_SHAPE
    with torch.no_grad():
        (boxes, masks), = model(return_loss=False, **copy.deepcopy(batch))
        (m_boxes, m_masks), = model(return_loss=False, **swapped_views(batch))
    assert sum(len(b) for b in boxes) > 0
    differing = pixels = 0
    for dets, segms, m_dets, m_segms in zip(boxes, masks, m_boxes, m_masks):
        assert len(segms) == len(dets) == len(m_segms) == len(m_dets)
        assert all(m.dtype == bool and m.shape == (h, w) for m in segms)
        order, m_order = np.argsort(-dets[:, 4]), np.argsort(-m_dets[:, 4])
        mirror = dets[order].copy()
        mirror[:, 0], mirror[:, 2] = w - dets[order, 2], w - dets[order, 0]
        np.testing.assert_allclose(m_dets[m_order], mirror, atol=1e-3)
        for i, j in zip(order, m_order):
            differing += int((m_segms[j] != segms[i][:, ::-1]).sum())
            pixels += h * w
    assert differing <= pixels * 1e-3
