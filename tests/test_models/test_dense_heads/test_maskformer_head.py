"""MaskFormerHead (mmdet 2.x's): outputs per decoder layer, mmdet's loss keys, an image
without ground truth, the test-time upsampling in memory-bounded chunks, bad arguments."""
import copy

import pytest
import torch
import torch.nn.functional as F

from ckptzoo.models.dense_heads.maskformer_head import upsample_masks
from ckptzoo.registry import MODELS
from tests.helpers.checkpointing import one_thread as _one_thread
from tests.helpers.maskformer import metas, mf_cfg, panoptic_batch

one_thread = pytest.fixture(autouse=True)(_one_thread)


def _head():
    cfg = mf_cfg()
    return MODELS.build(dict(cfg['panoptic_head'], train_cfg=cfg['train_cfg'],
                             test_cfg=cfg['test_cfg']))


def _feats():
    g = torch.Generator().manual_seed(0)
    return [torch.randn(2, c, 64 // s, 64 // s, generator=g)
            for c, s in ((64, 4), (128, 8), (256, 16), (512, 32))]


def test_outputs_and_losses():
    head = _head()
    cls, masks = head(_feats(), metas())
    assert cls.shape == (3, 2, 10, 6) and masks.shape == (3, 2, 10, 16, 16)
    b = panoptic_batch()
    losses = head.forward_train(_feats(), metas(), b['gt_bboxes'], b['gt_labels'],
                                b['gt_masks'], b['gt_semantic_seg'])
    assert set(losses) == {'loss_cls', 'loss_mask', 'loss_dice', 'd0.loss_cls',
                           'd0.loss_mask', 'd0.loss_dice', 'd1.loss_cls', 'd1.loss_mask',
                           'd1.loss_dice'}
    sum(losses.values()).backward()
    assert head.query_embed.weight.grad.abs().sum() > 0


def test_images_without_ground_truth():
    from ckptzoo.core.mask import BitmapMasks
    head = _head()
    empty = [BitmapMasks(torch.zeros(0, 64, 64).numpy(), 64, 64)] * 2
    losses = head.forward_train(_feats(), metas(), [torch.zeros(0, 4)] * 2,
                                [torch.zeros(0).long()] * 2, empty, None)
    assert all(torch.isfinite(v) for v in losses.values())
    assert float(losses['loss_mask']) == 0 and float(losses['loss_cls']) > 0


def test_preprocess_gt_adds_stuff_masks():
    head = _head()
    b = panoptic_batch()
    labels, masks = head.preprocess_gt(b['gt_labels'], b['gt_masks'], b['gt_semantic_seg'],
                                       metas())
    assert labels[0].tolist() == [0, 1, 3, 4] and labels[1].tolist() == [2, 4]
    assert masks[1].shape == (2, 64, 64) and masks[1].dtype == torch.long
    assert int(masks[1][1].sum()) == 26 * 60  # stuff 4 of image 1


def test_simple_test_upsamples_in_bounded_chunks():
    head = _head()
    head.eval()
    with torch.no_grad():
        cls, masks = head.simple_test(_feats(), metas())
        _, low = head.simple_test_low_res(_feats(), metas())
    assert cls.shape == (2, 10, 6) and masks.shape == (2, 10, 64, 64)
    ref = F.interpolate(low, size=(64, 64), mode='bilinear', align_corners=False)
    torch.testing.assert_close(masks, ref, rtol=0, atol=0)
    chunked = upsample_masks(low, (64, 64), limit=2 * 64 * 64 * 4 * 3)  # 3 queries a chunk
    torch.testing.assert_close(chunked, ref, rtol=0, atol=1e-6)  # float rounding only
    many = torch.randn(1, 40, 8, 8)  # 16 queries a chunk: rounded as at once
    torch.testing.assert_close(upsample_masks(many, (32, 32), limit=32 * 32 * 4 * 20),
                               F.interpolate(many, size=(32, 32), mode='bilinear',
                                             align_corners=False), rtol=0, atol=0)


def test_bad_arguments():
    cfg = copy.deepcopy(mf_cfg()['panoptic_head'])
    with pytest.raises(ValueError, match='pixel_decoder'):
        MODELS.build(dict(cfg, pixel_decoder=None))
    with pytest.raises(TypeError, match='with_cp'):
        MODELS.build(dict(cfg, with_cp='yes'))
    head = _head()
    b = panoptic_batch()
    with pytest.raises(NotImplementedError, match='gt_bboxes_ignore'):
        head.forward_train(_feats(), metas(), b['gt_bboxes'], b['gt_labels'], b['gt_masks'],
                           b['gt_semantic_seg'], gt_bboxes_ignore=[torch.zeros(0, 4)] * 2)
