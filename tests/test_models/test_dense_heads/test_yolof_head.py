import math

import pytest
import torch

from ckptzoo.models.checkpointing import MODES
from ckptzoo.registry import build_head
from tests.helpers.checkpointing import one_thread as _one_thread
from tests.helpers.retina_variants import assert_modes_exact, inputs, loss_and_grads

one_thread = pytest.fixture(autouse=True)(_one_thread)


def yolof_head_cfg(**kw):
    cfg = dict(type='YOLOFHead', num_classes=3, in_channels=8, reg_decoded_bbox=True,
               num_cls_convs=1, num_reg_convs=2,
               anchor_generator=dict(type='AnchorGenerator', ratios=[1.0], scales=[1, 2, 4],
                                     strides=[16]),
               bbox_coder=dict(type='DeltaXYWHBBoxCoder', target_means=[.0] * 4,
                               target_stds=[1.] * 4, add_ctr_clamp=True, ctr_clamp=32),
               loss_cls=dict(type='FocalLoss', use_sigmoid=True, gamma=2.0, alpha=0.25),
               loss_bbox=dict(type='GIoULoss', loss_weight=1.0),
               train_cfg=dict(assigner=dict(type='UniformAssigner', pos_ignore_thr=0.15,
                                            neg_ignore_thr=0.7),
                              allowed_border=-1, pos_weight=-1, debug=False),
               test_cfg=dict(nms_pre=1000, min_bbox_size=0, score_thr=0.0,
                             nms=dict(type='nms', iou_threshold=0.6), max_per_img=100))
    cfg.update(kw)
    return cfg


def _head(**kw):
    torch.manual_seed(0)
    return build_head(yolof_head_cfg(**kw))


def _feats():
    return inputs(strides=(16, ))


def test_keys_init_and_shapes():
    head = _head()
    keys = set(head.state_dict())
    assert {'cls_subnet.0.conv.weight', 'cls_subnet.0.bn.running_var',
            'bbox_subnet.1.bn.weight', 'cls_score.weight', 'bbox_pred.bias',
            'object_pred.weight'} <= keys
    assert 'cls_subnet.0.conv.bias' not in keys
    torch.testing.assert_close(head.cls_score.bias, torch.full((9, ), math.log(0.01 / 0.99)))
    assert (head.bbox_pred.bias == 0).all() and (head.cls_subnet[0].bn.weight == 1).all()
    cls, reg = head(_feats()[0])
    assert cls[0].shape == (2, 9, 4, 4) and reg[0].shape == (2, 12, 4, 4)
    assert list(head.checkpoint_units()) == ['level0']


def test_objectness_normalises_the_scores():
    head = _head()
    x = _feats()[0][0]
    cls = head.cls_score(head.cls_subnet(x)).view(2, 3, 3, 4, 4)
    obj = head.object_pred(head.bbox_subnet(x)).view(2, 3, 1, 4, 4)
    # sigmoid of the normalised score = sigmoid(cls) * sigmoid(obj), implicitly
    expected = (cls.sigmoid() * obj.sigmoid()).view(2, 9, 4, 4)
    torch.testing.assert_close(head(_feats()[0])[0][0].sigmoid(), expected)


def test_losses():
    losses, grads, _ = loss_and_grads(_head(), strides=(16, ))
    assert set(losses) == {'loss_cls', 'loss_bbox'}
    assert all(math.isfinite(v[0]) and v[0] > 0 for v in losses.values())
    assert grads['bbox_pred.weight'].abs().sum() > 0
    assert grads['object_pred.weight'].abs().sum() > 0


def test_no_gt_gives_a_zero_box_loss():
    head = _head()
    feats, metas, _, _ = _feats()
    losses = head.loss(*head(feats), [torch.zeros(0, 4)] * 2,
                       [torch.zeros(0, dtype=torch.long)] * 2, metas)
    assert losses['loss_bbox'].item() == 0 and losses['loss_cls'].item() > 0


def test_simple_test():
    head = _head().eval()
    feats, metas, _, _ = _feats()
    with torch.no_grad():
        (dets, labels), _ = head.simple_test([f.detach() for f in feats], metas)
    assert dets.shape[1] == 5 and len(dets) == len(labels) > 0


@pytest.mark.parametrize('mode', [m for m in MODES if m])
def test_every_checkpoint_mode_is_exact(mode):
    assert_modes_exact(_head, mode, strides=(16, ))


def test_bad_arguments():
    with pytest.raises(ValueError, match='one stride'):
        _head(anchor_generator=dict(type='AnchorGenerator', ratios=[1.0], scales=[1],
                                    strides=[16, 32]))
    with pytest.raises(ValueError, match='num_reg_convs must be a non-negative int, got -1'):
        _head(num_reg_convs=-1)
    head = _head()
    with pytest.raises(ValueError, match='expects 1 levels'):
        head(inputs(strides=(16, 32))[0])
