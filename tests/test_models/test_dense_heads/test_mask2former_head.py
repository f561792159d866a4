"""Mask2FormerHead (mmdet 2.x's): a prediction from the queries and after every decoder layer,
mmdet's loss keys, the points drawn from the default generator (a seed repeats the losses),
an image without ground truth, units, bad arguments."""
import copy

import pytest
import torch

from ckptzoo.registry import MODELS
from tests.helpers.checkpointing import one_thread as _one_thread
from tests.helpers.maskformer import m2f_cfg, metas, panoptic_batch

one_thread = pytest.fixture(autouse=True)(_one_thread)


def _head(**kw):
    cfg = m2f_cfg(**kw)
    return MODELS.build(dict(cfg['panoptic_head'], train_cfg=cfg['train_cfg'],
                             test_cfg=cfg['test_cfg']))


def _feats():
    g = torch.Generator().manual_seed(0)
    return [torch.randn(2, c, 64 // s, 64 // s, generator=g)
            for c, s in ((64, 4), (128, 8), (256, 16), (512, 32))]


def _losses(head, seed):
    b = panoptic_batch()
    torch.manual_seed(seed)
    return head.forward_train(_feats(), metas(), b['gt_bboxes'], b['gt_labels'], b['gt_masks'],
                              b['gt_semantic_seg'])


def test_outputs_losses_and_seeded_points():
    head = _head()
    cls_list, mask_list = head(_feats(), metas())
    assert len(cls_list) == len(mask_list) == 4
    assert cls_list[0].shape == (2, 10, 6) and mask_list[-1].shape == (2, 10, 16, 16)
    a, b = _losses(head, 3), _losses(head, 3)
    assert len(a) == 12 and {'loss_cls', 'd2.loss_dice'} <= set(a)
    assert all(torch.equal(a[k], b[k]) for k in a)
    c = _losses(head, 4)
    assert not torch.equal(a['loss_mask'], c['loss_mask'])  # other points
    assert head.num_points == 64 and head.oversample_ratio == 3.0


def test_images_without_ground_truth():
    from ckptzoo.core.mask import BitmapMasks
    head = _head()
    empty = [BitmapMasks(torch.zeros(0, 64, 64).numpy(), 64, 64)] * 2
    losses = head.forward_train(_feats(), metas(), [torch.zeros(0, 4)] * 2,
                                [torch.zeros(0).long()] * 2, empty, None)
    assert all(torch.isfinite(v) for v in losses.values())


def test_units_and_with_cp():
    head = _head()
    assert sorted(head.checkpoint_units()) == sorted(
        ['query_head', 'pixel_decoder.input0', 'pixel_decoder.input1', 'pixel_decoder.input2',
         'pixel_decoder.level0', 'pixel_decoder.mask_feature', 'pixel_decoder.encoder.layers.0',
         'pixel_decoder.encoder.layers.1', 'transformer_decoder.layers.0',
         'transformer_decoder.layers.1', 'transformer_decoder.layers.2'])
    cfg = m2f_cfg()
    full = MODELS.build(dict(cfg['panoptic_head'], with_cp=True, train_cfg=cfg['train_cfg']))
    assert set(full.checkpoint_plan().values()) == {'full'}


def test_bad_arguments():
    cfg = copy.deepcopy(m2f_cfg()['panoptic_head'])
    with pytest.raises(ValueError, match='loss_cls'):
        MODELS.build(dict(cfg, loss_cls=None))
    with pytest.raises(ValueError, match='num_transformer_feat_level'):
        MODELS.build(dict(cfg, num_transformer_feat_level=4))
