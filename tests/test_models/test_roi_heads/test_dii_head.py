"""DIIHead (Sparse R-CNN's dynamic instance interactive head): mmdet's state-dict keys, shapes
and order, its init, forward shapes, targets in the proposals' order, the losses, bad input."""
import math

import pytest
import torch

from ckptzoo.core.bbox.samplers import SamplingResult
from ckptzoo.core.bbox.assigners import AssignResult
from ckptzoo.registry import build_head

from tests.helpers.checkpointing import one_thread as _one_thread
from tests.helpers.sparse_rcnn import dii_head_cfg

one_thread = pytest.fixture(autouse=True)(_one_thread)

# mmdet 2.28.2's DIIHead of dii_head_cfg(), in its order (printed from mmdet's module)
MMDET_KEYS = {
    'fc_cls.weight': (3, 16), 'fc_cls.bias': (3, ), 'fc_reg.weight': (4, 16),
    'fc_reg.bias': (4, ), 'attention.attn.in_proj_weight': (48, 16),
    'attention.attn.in_proj_bias': (48, ), 'attention.attn.out_proj.weight': (16, 16),
    'attention.attn.out_proj.bias': (16, ), 'attention_norm.weight': (16, ),
    'attention_norm.bias': (16, ), 'instance_interactive_conv.dynamic_layer.weight': (256, 16),
    'instance_interactive_conv.dynamic_layer.bias': (256, ),
    'instance_interactive_conv.norm_in.weight': (8, ),
    'instance_interactive_conv.norm_in.bias': (8, ),
    'instance_interactive_conv.norm_out.weight': (16, ),
    'instance_interactive_conv.norm_out.bias': (16, ),
    'instance_interactive_conv.fc_layer.weight': (16, 784),
    'instance_interactive_conv.fc_layer.bias': (16, ),
    'instance_interactive_conv.fc_norm.weight': (16, ),
    'instance_interactive_conv.fc_norm.bias': (16, ),
    'instance_interactive_conv_norm.weight': (16, ),
    'instance_interactive_conv_norm.bias': (16, ), 'ffn.layers.0.0.weight': (32, 16),
    'ffn.layers.0.0.bias': (32, ), 'ffn.layers.1.weight': (16, 32), 'ffn.layers.1.bias': (16, ),
    'ffn_norm.weight': (16, ), 'ffn_norm.bias': (16, ), 'cls_fcs.0.weight': (16, 16),
    'cls_fcs.1.weight': (16, ), 'cls_fcs.1.bias': (16, ), 'reg_fcs.0.weight': (16, 16),
    'reg_fcs.1.weight': (16, ), 'reg_fcs.1.bias': (16, ), 'reg_fcs.3.weight': (16, 16),
    'reg_fcs.4.weight': (16, ), 'reg_fcs.4.bias': (16, ), 'reg_fcs.6.weight': (16, 16),
    'reg_fcs.7.weight': (16, ), 'reg_fcs.7.bias': (16, )}


def _head(**kw):
    torch.manual_seed(0)
    return build_head(dict(dii_head_cfg(), **kw))


def test_state_dict_keys_shapes_and_order_are_mmdets():
    head = _head()
    assert [(k, tuple(v.shape)) for k, v in head.state_dict().items()] == \
        list(MMDET_KEYS.items())
    assert head.reg_class_agnostic and head.reg_decoded_bbox


def test_init_as_mmdet():
    head = _head()
    assert torch.allclose(head.fc_cls.bias, torch.full((3, ), -math.log(99.)))
    assert torch.equal(head.fc_reg.bias, torch.zeros(4))
    bound = math.sqrt(6 / (16 + 16))  # xavier uniform of a 16x16 matrix
    assert head.cls_fcs[0].weight.abs().max() <= bound
    softmax = _head(loss_cls=dict(type='CrossEntropyLoss', use_sigmoid=False))
    assert softmax.fc_cls.out_features == 4 and torch.equal(softmax.fc_cls.bias,
                                                            torch.zeros(4))


def test_forward_shapes():
    head = _head()
    roi = torch.randn(2 * 5, 16, 7, 7)
    cls_score, delta, obj, attn = head(roi, torch.randn(2, 5, 16))
    assert cls_score.shape == (2, 5, 3) and delta.shape == (2, 5, 4)
    assert obj.shape == (2, 5, 16) and attn.shape == (2, 5, 16)


def _sampling(num=5, pos=(1, 3), gt=((2., 2., 20., 20.), (4., 6., 30., 12.))):
    bboxes = torch.rand(num, 4) * 10
    bboxes[:, 2:] += 12
    gt_inds = torch.zeros(num, dtype=torch.long)
    gt_inds[list(pos)] = torch.arange(1, len(pos) + 1)
    labels = torch.full((num, ), -1, dtype=torch.long)
    labels[list(pos)] = torch.tensor([2, 0])[:len(pos)]
    assign = AssignResult(len(gt), gt_inds, None, labels=labels)
    pos_inds = torch.tensor(pos, dtype=torch.long)
    neg_inds = torch.tensor([i for i in range(num) if i not in pos], dtype=torch.long)
    return SamplingResult(pos_inds, neg_inds, bboxes, torch.tensor(gt), assign,
                          torch.zeros(num, dtype=torch.uint8))


def test_targets_keep_the_proposals_order():
    head = _head()
    res = _sampling()
    labels, label_weights, targets, weights = head.get_targets([res, res], None, None,
                                                               dict(pos_weight=2), True)
    assert labels.tolist() == [3, 2, 3, 0, 3] * 2
    assert label_weights.tolist() == [1, 2, 1, 2, 1] * 2
    assert torch.equal(targets[1], torch.tensor([2., 2., 20., 20.]))
    assert torch.equal(targets[3], torch.tensor([4., 6., 30., 12.]))
    assert weights.sum() == 16 and weights[[0, 2, 4]].sum() == 0
    per_image = head.get_targets([res], None, None, dict(pos_weight=-1), False)
    assert isinstance(per_image[0], list) and per_image[1][0].tolist() == [1.] * 5


def test_losses_over_the_positives():
    head = _head()
    res = _sampling()
    targets = head.get_targets([res], None, None, dict(pos_weight=1))
    cls_score = torch.randn(5, 3, requires_grad=True)
    boxes = (targets[2] + torch.rand(5, 4)).requires_grad_()
    whwh = torch.tensor([40., 30., 40., 30.]).expand(1, 5, 4)
    losses = head.loss(cls_score, boxes, *targets, imgs_whwh=whwh)
    assert list(losses) == ['loss_cls', 'pos_acc', 'loss_bbox', 'loss_iou']
    pos = torch.tensor([1, 3])
    expected_l1 = 5.0 * ((boxes[pos] - targets[2][pos]) / whwh[0, pos]).abs().sum() / 2
    torch.testing.assert_close(losses['loss_bbox'], expected_l1)
    sum(v for k, v in losses.items() if 'loss' in k).backward()
    assert boxes.grad[[0, 2, 4]].abs().sum() == 0 and cls_score.grad.abs().sum() > 0
    # no positive: zero box losses, still in the graph
    res = _sampling(pos=())
    targets = head.get_targets([res], None, None, dict(pos_weight=1))
    losses = head.loss(cls_score, boxes, *targets, imgs_whwh=whwh)
    assert losses['loss_bbox'] == 0 and losses['loss_iou'].requires_grad


def test_bad_arguments():
    with pytest.raises(ValueError, match='init_cfg'):
        _head(init_cfg=dict(type='Xavier'))
    with pytest.raises(ValueError, match='reg_class_agnostic'):
        _head(reg_class_agnostic=False)
    with pytest.raises(ValueError, match='divisible'):
        build_head(dict(dii_head_cfg(), num_heads=3))
    with pytest.raises(ValueError, match='num_reg_fcs'):
        build_head(dict(dii_head_cfg(), num_reg_fcs=-1))
