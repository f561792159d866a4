"""YOLACTProtonet: mmdet 2.x keys, prototypes, crop, mask loss, memory-bounded test masks, the
protonet as a checkpoint unit (every mode exact), and the fixes over mmdet (deconv layers, no
in-place change of the detections)."""
import copy
import types

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import ckptzoo.models.dense_heads.yolact_protonet as protonet_module
from ckptzoo.registry import build_head
from tests.helpers.checkpointing import one_thread
from tests.helpers.unit_modes import Counting, assert_same, train_run

one_thread = pytest.fixture(autouse=True)(one_thread)


def _proto(**kw):
    cfg = dict(type='YOLACTProtonet', num_classes=3, in_channels=4, num_protos=2,
               proto_channels=(4, None, 2), proto_kernel_sizes=(3, -2, 1))
    cfg.update(kw)
    torch.manual_seed(0)
    return build_head(cfg)


def _meta(h=16, w=16, scale=1.0, ori=None):
    return dict(img_shape=(h, w, 3), pad_shape=(h, w, 3), ori_shape=ori or (h, w, 3),
                scale_factor=np.full(4, scale, dtype=np.float32))


def test_default_keys_and_shapes_as_mmdet():
    head = build_head(dict(type='YOLACTProtonet', num_classes=80))
    shapes = {k: tuple(v.shape) for k, v in head.state_dict().items()}
    assert shapes == {'protonet.0.weight': (256, 256, 3, 3), 'protonet.0.bias': (256, ),
                      'protonet.2.weight': (256, 256, 3, 3), 'protonet.2.bias': (256, ),
                      'protonet.4.weight': (256, 256, 3, 3), 'protonet.4.bias': (256, ),
                      'protonet.8.weight': (256, 256, 3, 3), 'protonet.8.bias': (256, ),
                      'protonet.10.weight': (32, 256, 1, 1), 'protonet.10.bias': (32, )}
    assert isinstance(head.protonet[11], nn.ReLU)  # include_last_relu
    assert head.forward_dummy(torch.randn(1, 256, 5, 5)).shape == (1, 32, 10, 10)
    assert list(head.checkpoint_units()) == ['protonet']
    assert not isinstance(_proto(include_last_relu=False).protonet[-1], nn.ReLU)


def test_deconv_layer_upsamples():
    """mmdet built ``(c, -k)`` with padding -k // 2 < 0, which torch refuses at forward."""
    head = _proto(proto_channels=(4, 4, 2), proto_kernel_sizes=(3, -2, 1))
    assert isinstance(head.protonet[2], nn.ConvTranspose2d)
    assert tuple(head.protonet[2].weight.shape) == (4, 4, 2, 2)
    assert head.forward_dummy(torch.randn(1, 4, 3, 3)).shape == (1, 2, 6, 6)


def test_crop_by_hand():
    head = _proto()
    masks = torch.ones(8, 8, 2)
    # relative boxes: [0.25, 0.25, 0.5, 0.75] -> x 2..4, y 2..6, widened by 1 pixel
    boxes = torch.tensor([[0.25, 0.25, 0.5, 0.75], [0.5, 0.0, 0.25, 1.0]])
    out = head.crop(masks, boxes)
    expected = torch.zeros(8, 8)
    expected[1:7, 1:5] = 1
    torch.testing.assert_close(out[..., 0], expected)
    expected = torch.zeros(8, 8)
    expected[:, 1:5] = 1  # a reversed box is cropped between its coordinates
    torch.testing.assert_close(out[..., 1], expected)


def _sampling(pos_inds, gt_inds):
    return types.SimpleNamespace(pos_inds=torch.tensor(pos_inds),
                                 pos_assigned_gt_inds=torch.tensor(gt_inds))


def test_training_masks_and_loss_by_hand():
    head = _proto()
    x = torch.randn(1, 4, 4, 4)
    coeff = [torch.randn(1, 2, 2, 2)]  # one anchor per position, 2 prototypes
    gt_bboxes = [torch.tensor([[0., 0., 8., 16.]])]
    sampling = [_sampling([1, 3], [0, 0])]
    masks = head(x, coeff, gt_bboxes, [_meta()], sampling)
    protos = head.forward_dummy(x)[0]  # [2, 8, 8]
    coeffs = coeff[0][0].permute(1, 2, 0).reshape(4, 2)[[1, 3]]
    full = torch.sigmoid(torch.einsum('phw,np->nhw', protos, coeffs))
    keep = torch.zeros(8, 8)
    keep[:, :5] = 1  # x 0..4 (+1 padding), y 0..8
    torch.testing.assert_close(masks[0], full * keep)
    gt_masks = [torch.zeros(1, 16, 16, dtype=torch.uint8)]
    gt_masks[0][0, :, :8] = 1
    losses = head.loss(masks, gt_masks, gt_bboxes, [_meta()], sampling)
    target = torch.zeros(8, 8)
    target[:, :4] = 1
    bce = F.binary_cross_entropy(masks[0], target.expand(2, 8, 8), reduction='none')
    expected = (bce.mean(dim=(1, 2)) / 0.5 / 1.0).sum() / 2
    torch.testing.assert_close(losses['loss_mask'][0], expected)


def test_loss_keeps_at_most_max_masks_and_zero_without_positives():
    head = _proto(max_masks_to_train=1)
    masks = [torch.rand(3, 8, 8, requires_grad=True), torch.rand(0, 8, 8, requires_grad=True)]
    gt_masks = [torch.ones(2, 16, 16, dtype=torch.uint8), torch.zeros(0, 16, 16)]
    gt_bboxes = [torch.tensor([[0., 0., 16., 16.], [0., 0., 8., 8.]]), torch.zeros(0, 4)]
    torch.manual_seed(3)
    select = torch.randperm(3)[:1]
    torch.manual_seed(3)
    losses = head.loss(masks, gt_masks, gt_bboxes, [_meta(), _meta()],
                       [_sampling([0, 1, 2], [0, 1, 1]), _sampling([], [])])
    gt_ind = [0, 1, 1][select.item()]
    area = 1.0 if gt_ind == 0 else 0.25
    expected = F.binary_cross_entropy(masks[0][select], torch.ones(1, 8, 8)) / area
    torch.testing.assert_close(losses['loss_mask'][0], expected)  # one positive in all
    assert losses['loss_mask'][1].item() == 0
    sum(losses['loss_mask']).backward()
    assert torch.isfinite(masks[0].grad).all()


def test_simple_test_masks_chunked_and_detections_untouched(monkeypatch):
    head = _proto().eval()
    feats = [torch.randn(2, 4, 4, 4)]
    dets = [torch.tensor([[0., 0., 8., 8., .9], [4., 4., 16., 12., .8]]), torch.zeros(0, 5)]
    labels = [torch.tensor([2, 0]), torch.zeros(0, dtype=torch.long)]
    coeffs = [torch.randn(2, 2), torch.zeros(0, 2)]
    metas = [_meta(16, 16, 2.0, ori=(8, 8, 3)), _meta(16, 16, 2.0, ori=(8, 8, 3))]
    before = copy.deepcopy(dets)
    for rescale in (False, True):
        with torch.no_grad():
            ref = head.simple_test(feats, dets, labels, coeffs, metas, rescale=rescale)
        for a, b in zip(dets, before):
            assert torch.equal(a, b)  # mmdet divided the boxes in place
        assert len(ref) == 2 and ref[1] == [[], [], []]
        assert [len(c) for c in ref[0]] == [1, 0, 1]
        size = (8, 8) if rescale else (16, 16)
        assert ref[0][2][0].shape == size and ref[0][2][0].dtype == np.uint8
        # one mask per chunk gives the same masks
        monkeypatch.setattr(protonet_module, 'GPU_MEM_LIMIT', 16 * 16 * 4)
        with torch.no_grad():
            got = head.simple_test(feats, dets, labels, coeffs, metas, rescale=rescale)
        monkeypatch.undo()
        for c in range(3):
            for m, n in zip(ref[0][c], got[0][c]):
                assert np.array_equal(m, n)
    empty = head.simple_test(feats, [torch.zeros(0, 5)] * 2, [labels[1]] * 2,
                             [coeffs[1]] * 2, metas)
    assert empty == [[[], [], []], [[], [], []]]


class _Dummy(nn.Module):
    def __init__(self, head):
        super().__init__()
        self.head = head

    def forward(self, x):
        return self.head.forward_dummy(x)


@pytest.mark.parametrize('mode', ['full', 'selective', 'offload'])
def test_every_checkpoint_mode_is_exact(mode, monkeypatch):
    plain = _proto().double().train()
    head = copy.deepcopy(plain)
    head.set_checkpoint_plan({'*': mode})
    x = torch.randn(2, 4, 4, 4, dtype=torch.float64)
    ref = train_run(_Dummy(plain), x)
    counting = Counting(monkeypatch)
    got = train_run(_Dummy(head), x)
    assert_same(ref, got)
    assert counting.calls >= 1


def test_with_cp_and_bad_arguments():
    assert _proto(with_cp=True).checkpoint_plan() == {'protonet': 'full'}
    with pytest.raises(ValueError, match='one entry per layer'):
        _proto(proto_channels=(4, 2))
    with pytest.raises(ValueError, match='non-zero ints'):
        _proto(proto_kernel_sizes=(3, 0, 1))
    with pytest.raises(ValueError, match='num_protos'):
        _proto(num_protos=5)
    with pytest.raises(ValueError, match='max_masks_to_train'):
        _proto(max_masks_to_train=0)
    with pytest.raises(TypeError, match='with_cp'):
        _proto(with_cp='full')
