"""DeformableDETRHead: mmdet's branch layout (shared unless box refinement, one more pair when
two-stage), init, outputs relative to the reference points, the two-stage encoder losses."""
import pytest
import torch

from ckptzoo.registry import build_model
from tests.helpers.detr import deformable_detr_cfg, detr_batch


def _head(**kw):
    cfg = deformable_detr_cfg(**kw)
    head = dict(cfg['bbox_head'], train_cfg=cfg['train_cfg'], test_cfg=cfg['test_cfg'])
    torch.manual_seed(0)
    head = build_model(head)
    head.init_weights()
    return head


def _feats(batch):
    for m in batch['img_metas']:
        m['batch_input_shape'] = (64, 64)
    torch.manual_seed(1)
    return [torch.randn(2, 16, s, s) for s in (8, 4, 2, 1)]


@pytest.mark.parametrize('refine, two_stage', [(False, False), (True, False), (True, True)])
def test_branches_keys_and_init(refine, two_stage):
    head = _head(with_box_refine=refine, as_two_stage=two_stage)
    num_pred = 3 + two_stage
    keys = head.state_dict()
    assert all(f'cls_branches.{i}.weight' in keys and f'reg_branches.{i}.4.bias' in keys
               for i in range(num_pred))
    shared = head.cls_branches[0] is head.cls_branches[num_pred - 1]
    assert shared is not refine
    assert ('query_embedding.weight' in keys) is not two_stage
    assert head.transformer.as_two_stage is two_stage
    torch.testing.assert_close(head.cls_branches[0].bias, torch.full((3, ), -4.59511985013459))
    assert head.reg_branches[1][-1].weight.abs().sum() == 0
    size_bias = head.reg_branches[0][-1].bias[2:]
    assert (size_bias == (0.0 if two_stage else -2.0)).all()


@pytest.mark.parametrize('refine, two_stage', [(False, False), (True, False), (True, True)])
def test_losses(refine, two_stage):
    head = _head(with_box_refine=refine, as_two_stage=two_stage)
    batch = detr_batch()
    outs = head(_feats(batch), batch['img_metas'])
    assert outs[0].shape == (3, 2, 6, 3) and outs[1].shape == (3, 2, 6, 4)
    assert (outs[2] is None) is not two_stage
    losses = head.loss(*outs, batch['gt_bboxes'], batch['gt_labels'], batch['img_metas'])
    enc = ['enc_loss_cls', 'enc_loss_bbox', 'enc_loss_iou'] if two_stage else []
    assert list(losses) == enc + ['loss_cls', 'loss_bbox', 'loss_iou', 'd0.loss_cls',
                                  'd0.loss_bbox', 'd0.loss_iou', 'd1.loss_cls',
                                  'd1.loss_bbox', 'd1.loss_iou']
    assert all(torch.isfinite(v) for v in losses.values())
    sum(losses.values()).backward()
    assert head.transformer.encoder.layers[0].attentions[0].value_proj.weight.grad.abs().sum() > 0


def test_first_layer_boxes_are_relative_to_the_reference_points():
    head = _head().eval()
    batch = detr_batch()
    feats = _feats(batch)
    with torch.no_grad():
        cls, box, _, _ = head(feats, batch['img_metas'])
        query_pos = head.query_embedding.weight[:, :16]
        ref = head.transformer.reference_points(query_pos).sigmoid()
    # the box branch's last layer is zero at init: centres are the reference points,
    # sizes sigmoid(-2)
    torch.testing.assert_close(box[0, 0, :, :2], ref)
    torch.testing.assert_close(box[0, 0, :, 2:], torch.sigmoid(torch.full((6, 2), -2.0)))


def test_get_bboxes_sigmoid_topk():
    head = _head().eval()
    batch = detr_batch()
    with torch.no_grad():
        results = head.simple_test(_feats(batch), batch['img_metas'], rescale=True)
    assert len(results) == 2
    dets, labels = results[0]
    assert dets.shape == (18, 5) and labels.max() < 3  # 6 queries x 3 classes < 100
    assert (dets[:-1, 4] >= dets[1:, 4]).all()
