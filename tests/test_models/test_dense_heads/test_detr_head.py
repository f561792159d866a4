"""DETRHead: mmdet's keys, the losses of every decoder layer (d0.*, ...), targets, decoding,
mmdet's argument checks as errors, version-1 checkpoints, more gts than queries (a warning
naming the image), checkpoint units of the transformer layers."""
import copy
import warnings

import numpy as np
import pytest
import torch

from ckptzoo.registry import build_detector, build_model
from tests.helpers.detr import detr_batch, detr_cfg


def _head(**kw):
    cfg = detr_cfg(**kw)
    head = dict(cfg['bbox_head'], train_cfg=cfg['train_cfg'], test_cfg=cfg['test_cfg'])
    torch.manual_seed(0)
    return build_model(head)


def _feats(head, batch):
    for m in batch['img_metas']:
        m['batch_input_shape'] = (64, 64)
    torch.manual_seed(1)
    return [torch.randn(2, 64, 2, 2)]


def test_keys_and_outputs():
    head = _head()
    keys = set(head.state_dict())
    assert {'input_proj.weight', 'fc_cls.weight', 'reg_ffn.layers.0.0.weight',
            'reg_ffn.layers.1.weight', 'fc_reg.weight', 'query_embedding.weight',
            'transformer.decoder.layers.2.attentions.1.attn.in_proj_weight',
            'transformer.decoder.post_norm.weight'} <= keys
    assert head.cls_out_channels == 4 and head.bg_cls_weight == 0.1
    assert head.loss_cls.class_weight == [1.0, 1.0, 1.0, 0.1]
    batch = detr_batch()
    cls, box = head(_feats(head, batch), batch['img_metas'])
    assert cls[0].shape == (3, 2, 6, 4) and box[0].shape == (3, 2, 6, 4)
    assert ((box[0] > 0) & (box[0] < 1)).all()


def test_losses_of_every_decoder_layer():
    head = _head()
    batch = detr_batch()
    losses = head.forward_train(_feats(head, batch), batch['img_metas'], batch['gt_bboxes'],
                                batch['gt_labels'])
    assert list(losses) == ['loss_cls', 'loss_bbox', 'loss_iou', 'd0.loss_cls',
                            'd0.loss_bbox', 'd0.loss_iou', 'd1.loss_cls', 'd1.loss_bbox',
                            'd1.loss_iou']
    assert all(torch.isfinite(v) and v > 0 for v in losses.values())


def test_targets_normalised_cxcywh():
    head = _head()
    batch = detr_batch()
    meta = dict(batch['img_metas'][1])
    cls_score, bbox_pred = torch.randn(6, 4), torch.rand(6, 4)
    labels, weights, targets, box_w, pos, neg = head._get_target_single(
        cls_score, bbox_pred, batch['gt_bboxes'][1], batch['gt_labels'][1], meta)
    assert len(pos) == 1 and len(neg) == 5 and (weights == 1).all()
    assert labels[pos].item() == 1 and (labels[neg] == 3).all()
    # (5, 5, 52, 44) in a 64 x 48 image
    torch.testing.assert_close(targets[pos][0], torch.tensor([28.5 / 64, 24.5 / 48, 47 / 64,
                                                              39 / 48]))
    assert box_w[pos].sum() == 4 and box_w[neg].sum() == 0


def test_more_gts_than_queries_warns():
    head = _head(num_query=2)
    batch = detr_batch()
    with pytest.warns(UserWarning, match=r'image x.jpg has 3 ground truths but only 2 '
                                         r'queries'):
        losses = head.forward_train(_feats(head, batch), batch['img_metas'],
                                    batch['gt_bboxes'], batch['gt_labels'])
    assert torch.isfinite(losses['loss_bbox'])


def test_get_bboxes_softmax_rescale_and_clamp():
    head = _head()
    head.test_cfg = dict(max_per_img=4)
    cls = torch.randn(6, 4)
    box = torch.tensor([[0.5, 0.5, 2.0, 2.0]]).repeat(6, 1)
    dets, labels = head._get_bboxes_single(cls, box, (48, 64, 3), np.full(4, 2.0), rescale=True)
    assert dets.shape == (4, 5) and labels.shape == (4, )
    torch.testing.assert_close(dets[0, :4], torch.tensor([0., 0., 32., 24.]))
    scores, best = cls.softmax(-1)[:, :-1].max(-1)
    torch.testing.assert_close(dets[:, 4], scores.topk(4)[0])
    head.test_cfg = dict(max_per_img=100)  # more than the 6 queries: all (mmdet fails)
    assert head._get_bboxes_single(cls, box, (48, 64, 3), None)[0].shape == (6, 5)


@pytest.mark.parametrize('change, error, match', [
    (dict(loss_cls=dict(type='CrossEntropyLoss', bg_cls_weight=0.1, use_sigmoid=False,
                        loss_weight=2.0, class_weight=1.0)), ValueError,
     r'classification loss_weight \(2.0\) and the assigner'),
    (dict(loss_cls=dict(type='CrossEntropyLoss', use_sigmoid=False, class_weight=1)),
     TypeError, 'class_weight must be a float'),
    (dict(positional_encoding=dict(type='SinePositionalEncoding', num_feats=4)), ValueError,
     r'num_feats \(4\) must be half'),
    (dict(transformer=None), ValueError, 'needs a transformer'),
])
def test_bad_arguments(change, error, match):
    cfg = detr_cfg()
    head = dict(cfg['bbox_head'], train_cfg=cfg['train_cfg'], **change)
    with pytest.raises(error, match=match):
        build_model(head)


def test_missing_batch_input_shape_is_named():
    head = _head()
    with pytest.raises(KeyError, match='batch_input_shape'):
        head([torch.randn(2, 64, 2, 2)], detr_batch()['img_metas'])


def test_version1_checkpoint_keys_convert():
    torch.manual_seed(0)
    model = build_detector(detr_cfg())
    state = model.state_dict()
    old = {k.replace('.attentions.0.', '.self_attn.').replace('.ffns.0.', '.ffn.')
           .replace('.attentions.1.', '.multihead_attn.')
           .replace('.decoder.post_norm.', '.decoder.norm.'): v for k, v in state.items()}
    assert old.keys() != state.keys()
    fresh = build_detector(detr_cfg())
    fresh.load_state_dict(old, strict=True)  # plain dict: no version metadata, converted
    for k, v in state.items():
        torch.testing.assert_close(fresh.state_dict()[k], v, rtol=0, atol=0)


def test_units_and_with_cp():
    head = _head()
    assert list(head.checkpoint_units()) == [
        'transformer.encoder.layers.0', 'transformer.encoder.layers.1',
        'transformer.decoder.layers.0', 'transformer.decoder.layers.1',
        'transformer.decoder.layers.2']
    assert set(_head(with_cp=True).checkpoint_plan().values()) == {'full'}
    with warnings.catch_warnings():
        warnings.simplefilter('error')
        copy.deepcopy(head)
