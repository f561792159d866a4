"""DETR and Deformable DETR (plain, box refinement, two-stage) end to end from mmdet-schema
configs at toy size: keys, a train step (every decoder layer's losses), backward, simple_test's
format, padding masks from img_shape within batch_input_shape, and every checkpoint mode
(each encoder / decoder layer a unit, segments over layers) exact with dropout 0.1."""

import numpy as np
import pytest
import torch

from ckptzoo.registry import build_detector
from tests.helpers.detr import (assert_detector_mode_exact, deformable_detr_cfg, detr_batch,
                                detr_cfg)

VARIANTS = {
    'detr': lambda **kw: detr_cfg(**kw),
    'deformable': lambda **kw: deformable_detr_cfg(**kw),
    'refine': lambda **kw: deformable_detr_cfg(with_box_refine=True, **kw),
    'two_stage': lambda **kw: deformable_detr_cfg(with_box_refine=True, as_two_stage=True,
                                                  **kw),
}


def _model(variant, **kw):
    torch.manual_seed(0)
    model = build_detector(VARIANTS[variant](**kw))
    model.init_weights()
    return model


@pytest.mark.parametrize('variant', list(VARIANTS))
def test_train_step_and_simple_test(variant):
    model = _model(variant)
    out = model.train_step(detr_batch(), None)
    log = out['log_vars']
    assert {'loss_cls', 'loss_bbox', 'loss_iou', 'd0.loss_cls', 'd1.loss_iou'} <= set(log)
    assert ('enc_loss_cls' in log) is (variant == 'two_stage')
    assert all(np.isfinite(v) for v in log.values())
    out['loss'].backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)
    model.eval()
    batch = detr_batch()
    with torch.no_grad():
        results = model.forward_test([batch['img']], [batch['img_metas']], rescale=True)
    assert len(results) == 2 and len(results[0]) == 3
    assert all(r.dtype == np.float32 and r.shape[1] == 5 for res in results for r in res)
    # image 2 is 48 x 64 at scale 2: boxes within its original 24 x 32
    boxes = np.concatenate(results[1])
    assert (boxes[:, [0, 2]] <= 32 + 1e-4).all() and (boxes[:, [1, 3]] <= 24 + 1e-4).all()



@pytest.mark.parametrize('variant', ['detr', 'two_stage'])
def test_refusals_with_mmdets_messages(variant):
    """aug_test and gt_bboxes_ignore are refused, in mmdet's words, before any forward."""
    model = _model(variant).eval()
    batch = detr_batch()
    name = type(model.bbox_head).__name__
    with pytest.raises(NotImplementedError,
                       match=f'{name} does not support test-time augmentation'):
        model.forward_test([batch['img'][:1]] * 2, [batch['img_metas'][:1]] * 2)
    model.train()
    with pytest.raises(NotImplementedError, match='does not support gt_bboxes_ignore'):
        model.forward_train(**batch, gt_bboxes_ignore=[torch.zeros(0, 4)] * 2)

def test_keys_as_mmdet():
    keys = set(_model('detr').state_dict())
    assert {'backbone.conv1.weight', 'bbox_head.input_proj.weight',
            'bbox_head.transformer.encoder.layers.0.ffns.0.layers.0.0.weight',
            'bbox_head.query_embedding.weight'} <= keys
    keys = set(_model('two_stage').state_dict())
    assert {'neck.convs.0.conv.weight', 'neck.extra_convs.0.gn.weight',
            'bbox_head.transformer.level_embeds', 'bbox_head.transformer.enc_output.weight',
            'bbox_head.cls_branches.3.weight', 'bbox_head.reg_branches.3.0.weight'} <= keys


def test_padding_masks_from_img_shape_in_batch_input_shape():
    """1 outside each image's img_shape within batch_input_shape (mmdet's semantics)."""
    head = _model('detr').bbox_head
    metas = detr_batch()['img_metas']
    for m in metas:
        m['batch_input_shape'] = (64, 64)
    masks = head._image_masks(torch.zeros(2, 1, 2, 2), metas)
    assert masks.shape == (2, 64, 64)
    assert masks[0, :, :60].sum() == 0 and (masks[0, :, 60:] == 1).all()
    assert masks[1, :48].sum() == 0 and (masks[1, 48:] == 1).all()


def test_units_cover_every_layer():
    names = list(_model('refine').checkpoint_units())
    assert [n for n in names if n.startswith('bbox_head')] == [
        'bbox_head.transformer.encoder.layers.0', 'bbox_head.transformer.encoder.layers.1',
        'bbox_head.transformer.decoder.layers.0', 'bbox_head.transformer.decoder.layers.1',
        'bbox_head.transformer.decoder.layers.2']
    assert names[0].startswith('backbone.')
    model = _model('detr', with_cp=True)
    assert {m for n, m in model.checkpoint_plan().items() if n.startswith('bbox_head')} == \
        {'full'}


SEGMENTS = [['bbox_head.transformer.encoder.layers.0', 'bbox_head.transformer.encoder.layers.1'],
            ['bbox_head.transformer.decoder.layers.0', 'bbox_head.transformer.decoder.layers.2']]


@pytest.mark.parametrize('variant', list(VARIANTS))
@pytest.mark.parametrize('mode, segments', [('full', None), ('selective', None),
                                            ('offload', None), (None, SEGMENTS)])
def test_every_mode_exact_with_dropout(variant, mode, segments, monkeypatch):
    plain = _model(variant).double().train()
    assert_detector_mode_exact(plain, detr_batch(torch.float64), monkeypatch, mode=mode,
                               segments=segments)
