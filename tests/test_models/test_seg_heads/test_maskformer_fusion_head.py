"""MaskFormerFusionHead: panoptic maps and instance results as mmdet 2.x's, made from the
low-resolution masks in chunks bounded by ``mask_mem_limit`` (the same results as from the
full-size masks at once, whatever the chunk; the float32 mask scores up to rounding)."""
import pytest
import torch
import torch.nn.functional as F

from ckptzoo.evaluation.panoptic_utils import INSTANCE_OFFSET
from ckptzoo.registry import MODELS

METAS = [dict(img_shape=(64, 64, 3), ori_shape=(64, 64, 3), batch_input_shape=(64, 64)),
         dict(img_shape=(56, 60, 3), ori_shape=(45, 50, 3), batch_input_shape=(64, 64))]


def _head(limit=1 << 30, **test_cfg):
    cfg = dict(panoptic_on=True, instance_on=True, max_per_image=15, object_mask_thr=0.3,
               iou_thr=0.4, filter_low_score=False)
    cfg.update(test_cfg)
    return MODELS.build(dict(type='MaskFormerFusionHead', num_things_classes=3,
                             num_stuff_classes=2, test_cfg=cfg, mask_mem_limit=limit))


def _inputs(seed):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(2, 12, 6, generator=g) * 3, torch.randn(2, 12, 16, 16, generator=g) * 4)


@pytest.mark.parametrize('filter_low_score', [False, True])
@pytest.mark.parametrize('rescale', [False, True])
def test_chunks_equal_all_at_once(filter_low_score, rescale):
    seen = set()
    for seed in range(4):
        cls, low = _inputs(seed)
        full = F.interpolate(low, size=(64, 64), mode='bilinear', align_corners=False)
        ref = _head(filter_low_score=filter_low_score).simple_test(cls, full, METAS,
                                                                   rescale=rescale)
        small = _head(64 * 64 * 4 * 2, filter_low_score=filter_low_score)  # 2 masks a chunk
        got = small.simple_test(cls, low, METAS, rescale=rescale)
        for r, g, meta in zip(ref, got, METAS):
            shape = meta['ori_shape' if rescale else 'img_shape'][:2]
            assert r['pan_results'].shape == shape and r['pan_results'].dtype == torch.int32
            assert torch.equal(g['pan_results'], r['pan_results'])
            seen |= set(r['pan_results'].unique().tolist())
            (la, ba, ma), (lb, bb, mb) = g['ins_results'], r['ins_results']
            assert torch.equal(la, lb) and torch.equal(ma, mb)
            # the mask scores are float sums, whose rounding depends on the chunk shape
            torch.testing.assert_close(ba, bb, rtol=0, atol=1e-6)
            labels, bboxes, masks = r['ins_results']
            assert bboxes.shape == (len(labels), 5) and masks.shape == (len(labels), ) + shape
            assert (labels < 3).all() and masks.dtype == torch.bool
    assert 5 in seen and any(s > INSTANCE_OFFSET for s in seen)  # void and things seen


def test_panoptic_ids_and_void():
    head = _head(instance_on=False)
    cls = torch.full((1, 3, 6), -10.)
    cls[0, 0, 1] = cls[0, 1, 1] = cls[0, 2, 4] = 10.  # two of thing 1, one of stuff 4
    masks = torch.full((1, 3, 64, 64), -10.)
    masks[0, 0, :20] = masks[0, 1, 20:40] = masks[0, 2, 40:60] = 10.
    pan = head.simple_test(cls, masks, METAS[:1])[0]['pan_results']
    assert 'ins_results' not in head.simple_test(cls, masks, METAS[:1])[0]
    assert pan[0, 0] == 1 + INSTANCE_OFFSET and pan[30, 0] == 1 + 2 * INSTANCE_OFFSET
    # rows 60+ are no query's mask: the arg-max gives them to the first query (mmdet's)
    assert pan[50, 0] == 4 and pan[63, 0] == 1 + INSTANCE_OFFSET
    cls[0, :, -1] = 20.  # every query no-object: all void
    assert (head.simple_test(cls, masks, METAS[:1])[0]['pan_results'] == 5).all()


def test_bad_arguments():
    with pytest.raises(ValueError, match='mask_mem_limit'):
        _head(0)
    with pytest.raises(NotImplementedError, match='semantic'):
        _head(semantic_on=True).simple_test(*_inputs(0), METAS)
    assert _head().forward_train() == {}
