"""FCNMaskHead: mmdet 2.x's layers and keys, its loss, and its pasting of masks into images
(checked against a direct bilinear computation at the pixel centres)."""
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from ckptzoo.models.roi_heads.mask_heads.fcn_mask_head import (FCNMaskHead, _paste_chunks,
                                                               paste_masks)
from ckptzoo.registry import build_model

MMDET_KEYS = ([f'convs.{i}.conv.{p}' for i in range(4) for p in ('weight', 'bias')]
              + ['upsample.weight', 'upsample.bias', 'conv_logits.weight', 'conv_logits.bias'])


def _head(**kw):
    torch.manual_seed(0)
    cfg = dict(type='FCNMaskHead', num_convs=2, in_channels=8, conv_out_channels=8,
               num_classes=3)
    cfg.update(kw)
    return build_model(cfg)


def test_default_head_keys_and_shapes_equal_mmdet():
    head = build_model(dict(type='FCNMaskHead'))  # mask_rcnn_r50_fpn's mask_head, 80 classes
    assert isinstance(head, FCNMaskHead)
    shapes = {k: tuple(v.shape) for k, v in head.state_dict().items()}
    assert list(shapes) == MMDET_KEYS
    assert shapes['convs.0.conv.weight'] == (256, 256, 3, 3)
    assert shapes['upsample.weight'] == (256, 256, 2, 2)
    assert shapes['conv_logits.weight'] == (80, 256, 1, 1)
    assert isinstance(head.upsample, torch.nn.ConvTranspose2d)
    assert head.upsample.stride == (2, 2) and head.roi_feat_size == (14, 14)


def test_gn_head_keys_equal_mmdet():
    """mask_rcnn_r50_fpn_gn-all's head: GN convs without bias, named ``gn``."""
    head = build_model(dict(type='FCNMaskHead', norm_cfg=dict(type='GN', num_groups=32,
                                                              requires_grad=True)))
    keys = list(head.state_dict())
    assert keys[:3] == ['convs.0.conv.weight', 'convs.0.gn.weight', 'convs.0.gn.bias']
    assert len(keys) == 4 * 3 + 4


def test_init_kaiming_fan_out_and_zero_bias():
    head = build_model(dict(type='FCNMaskHead'))
    for m in (head.upsample, head.conv_logits):
        assert torch.count_nonzero(m.bias) == 0
    # kaiming normal, fan_out, relu: std sqrt(2 / fan_out), fan_out = size(0) * kernel area
    torch.testing.assert_close(head.upsample.weight.std().item(), math.sqrt(2 / (256 * 4)),
                               rtol=0.02, atol=0)
    torch.testing.assert_close(head.conv_logits.weight.std().item(), math.sqrt(2 / 80),
                               rtol=0.05, atol=0)


@pytest.mark.parametrize('upsample,num_convs,agnostic,out_shape,logits_in', [
    (dict(type='deconv', scale_factor=2), 2, False, (5, 3, 28, 28), 8),
    (dict(type='nearest', scale_factor=2), 2, False, (5, 3, 28, 28), 8),
    (dict(type='bilinear', scale_factor=2), 0, False, (5, 3, 28, 28), 6),
    (dict(type=None), 2, True, (5, 1, 14, 14), 8),
    (dict(type='deconv', scale_factor=2), 0, True, (5, 1, 28, 28), 8),
])
def test_forward_shapes(upsample, num_convs, agnostic, out_shape, logits_in):
    head = _head(upsample_cfg=upsample, num_convs=num_convs, class_agnostic=agnostic,
                 in_channels=6)
    assert head(torch.randn(5, 6, 14, 14)).shape == out_shape
    assert head.conv_logits.in_channels == logits_in


def test_forward_is_convs_deconv_relu_logits():
    head = _head(norm_cfg=dict(type='BN')).eval()
    assert 'convs.0.bn.running_mean' in head.state_dict()
    gen = torch.Generator().manual_seed(0)
    for conv in head.convs:  # non-trivial statistics, so the norm is seen
        conv.bn.running_mean.copy_(torch.rand(8, generator=gen))
        conv.bn.running_var.copy_(torch.rand(8, generator=gen) + 0.5)
    x = torch.randn(4, 8, 14, 14, generator=gen)
    y = x
    for conv in head.convs:
        y = F.relu(F.batch_norm(conv.conv(y), conv.bn.running_mean, conv.bn.running_var,
                                conv.bn.weight, conv.bn.bias))
    y = F.relu(F.conv_transpose2d(y, head.upsample.weight, head.upsample.bias, stride=2))
    y = F.conv2d(y, head.conv_logits.weight, head.conv_logits.bias)
    with torch.no_grad():
        torch.testing.assert_close(head(x), y)


@pytest.mark.parametrize('kw,err,words', [
    (dict(upsample_cfg=dict(type='carafe', scale_factor=2, foo=1)), ValueError, 'foo'),
    (dict(upsample_cfg=dict(type='pixel_shuffle', scale_factor=2)), ValueError,
     'pixel_shuffle'),
    (dict(upsample_cfg=dict(scale_factor=2)), ValueError, "'type'"),
    (dict(upsample_cfg=dict(type='deconv')), ValueError, 'scale_factor'),
    (dict(upsample_cfg=dict(type='deconv', scale_factor=2, foo=1)), ValueError, 'foo'),
    (dict(init_cfg=dict(type='Normal', std=0.01)), ValueError, 'init_cfg'),
    (dict(predictor_cfg=dict(type='DCN')), NotImplementedError, 'DCN'),
    (dict(num_convs=-1), ValueError, 'num_convs'),
])
def test_bad_config(kw, err, words):
    with pytest.raises(err, match=words):
        _head(**kw)


def test_carafe_upsampling_as_mmdet():
    # carafe/mask_rcnn_r50_fpn_carafe_1x_coco.py's mask head: CARAFEPack keys, 2x upsampling
    head = _head(upsample_cfg=dict(type='carafe', scale_factor=2, up_kernel=5, up_group=1,
                                   encoder_kernel=3, encoder_dilation=1,
                                   compressed_channels=4))
    keys = [k for k in head.state_dict() if k.startswith('upsample.')]
    assert keys == ['upsample.channel_compressor.weight', 'upsample.channel_compressor.bias',
                    'upsample.content_encoder.weight', 'upsample.content_encoder.bias']
    assert tuple(head.upsample.content_encoder.weight.shape) == (100, 4, 3, 3)
    with torch.no_grad():
        assert head(torch.randn(2, 8, 7, 7)).shape[-2:] == (14, 14)


def test_loss_is_bce_on_the_label_channel():
    head = _head(loss_mask=dict(type='CrossEntropyLoss', use_mask=True, loss_weight=2.0))
    gen = torch.Generator().manual_seed(1)
    pred = torch.randn(4, 3, 6, 6, generator=gen, requires_grad=True)
    targets = (torch.rand(4, 6, 6, generator=gen) > 0.5).float()
    labels = torch.tensor([2, 0, 2, 1])
    loss = head.loss(pred, targets, labels)
    assert list(loss) == ['loss_mask'] and loss['loss_mask'].shape == (1, )
    ref = 2.0 * F.binary_cross_entropy_with_logits(pred[torch.arange(4), labels], targets)
    torch.testing.assert_close(loss['loss_mask'][0], ref)
    loss['loss_mask'].sum().backward()
    # only each RoI's own class channel gets a gradient
    assert torch.count_nonzero(pred.grad[torch.arange(4), labels]) == 4 * 36
    assert torch.count_nonzero(pred.grad) == 4 * 36


def test_loss_class_agnostic_and_soft_targets():
    head = _head(class_agnostic=True)
    pred = torch.randn(3, 1, 4, 4)
    targets = torch.rand(3, 4, 4)  # soft targets are taken as they are
    loss = head.loss(pred, targets, torch.tensor([2, 1, 0]))['loss_mask']
    torch.testing.assert_close(loss[0], F.binary_cross_entropy_with_logits(pred[:, 0], targets))


def test_loss_without_positives_is_zero_and_keeps_the_graph():
    head = _head()
    x = torch.randn(0, 8, 14, 14)
    pred = head(x)
    loss = head.loss(pred, torch.zeros(0, 28, 28), torch.zeros(0, dtype=torch.long))
    assert loss['loss_mask'].item() == 0 and loss['loss_mask'].requires_grad
    loss['loss_mask'].backward()
    assert head.conv_logits.weight.grad is not None
    assert torch.count_nonzero(head.conv_logits.weight.grad) == 0


# ---- pasting ----------------------------------------------------------------------------

def _bilinear_zero_pad(mask, ys, xs):
    """``mask`` sampled at fractional (row, column) indices, bilinear, zero outside."""
    h, w = mask.shape
    out = np.zeros((len(ys), len(xs)))
    for i, y in enumerate(ys):
        for j, x in enumerate(xs):
            y0, x0 = math.floor(y), math.floor(x)
            for yy, wy in ((y0, 1 - (y - y0)), (y0 + 1, y - y0)):
                for xx, wx in ((x0, 1 - (x - x0)), (x0 + 1, x - x0)):
                    if 0 <= yy < h and 0 <= xx < w:
                        out[i, j] += wy * wx * mask[yy, xx]
    return out


def _direct_paste(prob, box, img_h, img_w, region):
    """A mask's probabilities in the image: the pixel centre (c + 0.5) maps to the mask index
    (c + 0.5 - x0) / (x1 - x0) * w - 0.5 (grid_sample, align_corners=False); only the region
    around all boxes (mmdet's CPU skip_empty) is filled."""
    h, w = prob.shape
    x0, y0, x1, y1 = [float(v) for v in box]
    (ry0, ry1), (rx0, rx1) = region
    ys = [(r + 0.5 - y0) / (y1 - y0) * h - 0.5 for r in range(ry0, ry1)]
    xs = [(c + 0.5 - x0) / (x1 - x0) * w - 0.5 for c in range(rx0, rx1)]
    out = np.zeros((img_h, img_w))
    out[ry0:ry1, rx0:rx1] = _bilinear_zero_pad(prob, ys, xs)
    return out


def _region(box, img_h, img_w):
    x0, y0, x1, y1 = [float(v) for v in box]
    return ((max(math.floor(y0) - 1, 0), min(math.ceil(y1) + 1, img_h)),
            (max(math.floor(x0) - 1, 0), min(math.ceil(x1) + 1, img_w)))


def _seg_inputs(num_classes=3):
    gen = torch.Generator().manual_seed(2)
    mask_pred = torch.randn(4, num_classes, 7, 7, generator=gen) * 3
    bboxes = torch.tensor([[2.3, 3.7, 20.2, 15.9, 0.9],
                           [10.0, 0.0, 39.0, 31.0, 0.8],
                           [-3.2, 5.5, 9.4, 30.6, 0.7],  # beyond the left border
                           [30.5, 20.25, 50.0, 32.0, 0.6]])  # beyond the right / bottom
    labels = torch.tensor([1, 0, 1, 2])
    return mask_pred, bboxes, labels


def _check_against_direct(segms, mask_pred, bboxes, labels, img_h, img_w, thr, agnostic=False):
    probs = mask_pred.sigmoid().double().numpy()
    seen = [0] * len(segms)
    for i, label in enumerate(labels.tolist()):
        got = segms[label][seen[label]]
        seen[label] += 1
        assert got.shape == (img_h, img_w) and got.dtype == np.bool_
        prob = probs[i, 0 if agnostic else label]
        want = _direct_paste(prob, bboxes[i, :4], img_h, img_w,
                             _region(bboxes[i, :4], img_h, img_w))
        near = np.abs(want - thr) < 1e-5
        assert near.sum() < 3
        np.testing.assert_array_equal(got[~near], (want >= thr)[~near])
        assert got.any()
    assert seen == [len(s) for s in segms]


def test_get_seg_masks_equals_direct_paste():
    head = _head()
    mask_pred, bboxes, labels = _seg_inputs()
    segms = head.get_seg_masks(mask_pred, bboxes, labels, dict(mask_thr_binary=0.5),
                               (32, 40, 3), np.ones(4, dtype=np.float32), rescale=False)
    assert [len(s) for s in segms] == [1, 2, 1]
    _check_against_direct(segms, mask_pred, bboxes, labels, 32, 40, 0.5)


def test_get_seg_masks_threshold_and_class_agnostic():
    head = _head(class_agnostic=True)
    mask_pred, bboxes, labels = _seg_inputs(num_classes=1)
    segms = head.get_seg_masks(mask_pred, bboxes, labels, dict(mask_thr_binary=0.3),
                               (32, 40), torch.ones(4), rescale=False)
    assert len(segms) == 3  # class lists follow num_classes, masks the agnostic channel
    _check_against_direct(segms, mask_pred, bboxes, labels, 32, 40, 0.3, agnostic=True)
    # a negative threshold gives probabilities x 255 as uint8 (mmdet's debug output)
    raw = head.get_seg_masks(mask_pred, bboxes, labels, dict(mask_thr_binary=-1), (32, 40),
                             torch.ones(4), rescale=False)
    first = raw[1][0]
    assert first.dtype == np.uint8
    want = _direct_paste(mask_pred[0, 0].sigmoid().double().numpy(), bboxes[0, :4], 32, 40,
                         _region(bboxes[0, :4], 32, 40))
    assert np.abs(first.astype(float) - np.floor(want * 255)).max() <= 1


def test_get_seg_masks_rescale():
    head = _head()
    mask_pred, bboxes, labels = _seg_inputs()
    scale = np.array([1.5, 1.25, 1.5, 1.25], dtype=np.float32)
    # rescale=False: the resized image, ori_shape x factors rounded half to even
    segms = head.get_seg_masks(mask_pred, bboxes, labels, dict(mask_thr_binary=0.5),
                               (27, 33), scale, rescale=False)
    assert segms[0][0].shape == (34, 50)  # 27 * 1.25 = 33.75, 33 * 1.5 = 49.5 -> 50
    segms = head.get_seg_masks(mask_pred, bboxes, labels, dict(mask_thr_binary=0.5),
                               (26, 27), scale, rescale=False)
    assert segms[0][0].shape == (32, 40)  # 26 * 1.25 = 32.5 -> 32, 27 * 1.5 = 40.5 -> 40
    # rescale=True: the original image, the boxes divided by the factors
    segms = head.get_seg_masks(mask_pred, bboxes, labels, dict(mask_thr_binary=0.5),
                               (26, 27, 3), scale, rescale=True)
    scaled = bboxes.clone()
    scaled[:, :4] /= torch.from_numpy(scale)
    _check_against_direct(segms, mask_pred, scaled, labels, 26, 27, 0.5)


def test_get_seg_masks_probabilities_from_aug_test_are_not_squashed_again():
    head = _head()
    mask_pred, bboxes, labels = _seg_inputs()
    from_logits = head.get_seg_masks(mask_pred, bboxes, labels, dict(mask_thr_binary=0.5),
                                     (32, 40), torch.ones(4), rescale=False)
    from_probs = head.get_seg_masks(mask_pred.sigmoid().numpy(), bboxes, labels,
                                    dict(mask_thr_binary=0.5), (32, 40), torch.ones(4),
                                    rescale=False)
    for a, b in zip(from_logits, from_probs):
        for x, y in zip(a, b):
            np.testing.assert_array_equal(x, y)


def test_get_seg_masks_on_cpu_fills_only_the_region_around_the_boxes():
    """A box much wider than its mask (90 px over 7 cells) reaches past the one-pixel margin
    mmdet's CPU paste fills: column 8 would sample 38 % of the mask's first column."""
    head = _head()
    box = torch.tensor([[10.0, 10.0, 100.0, 20.0]])
    segms = head.get_seg_masks(torch.full((1, 3, 7, 7), 10.0), box, torch.tensor([0]),
                               dict(mask_thr_binary=0.3), (32, 120), torch.ones(4),
                               rescale=False)
    whole, _ = paste_masks(torch.ones(1, 1, 7, 7), box, 32, 120, skip_empty=False)
    assert whole[0, 15, 8] > 0.3
    mask = segms[0][0]
    assert mask[15, 9:101].all() and not mask[15, :9].any()


def test_get_seg_masks_needs_mask_thr_binary():
    head = _head()
    mask_pred, bboxes, labels = _seg_inputs()
    with pytest.raises(ValueError, match='mask_thr_binary'):
        head.get_seg_masks(mask_pred, bboxes, labels, dict(score_thr=0.05), (32, 40),
                           torch.ones(4), rescale=False)


def test_get_seg_masks_without_detections():
    head = _head()
    segms = head.get_seg_masks(torch.zeros(0, 3, 28, 28), torch.zeros(0, 5),
                               torch.zeros(0, dtype=torch.long), dict(mask_thr_binary=0.5),
                               (32, 40), torch.ones(4), rescale=True)
    assert segms == [[], [], []]


def test_paste_whole_image_agrees_inside_the_region():
    mask_pred, bboxes, _ = _seg_inputs()
    masks = mask_pred[:, :1].sigmoid()
    for i in range(len(masks)):
        part, (rows, cols) = paste_masks(masks[i:i + 1], bboxes[i:i + 1, :4], 32, 40)
        whole, spatial = paste_masks(masks[i:i + 1], bboxes[i:i + 1, :4], 32, 40,
                                     skip_empty=False)
        assert spatial == () and whole.shape == (1, 32, 40)
        torch.testing.assert_close(part, whole[:, rows, cols], rtol=0, atol=1e-6)


def test_paste_box_beyond_the_image_is_empty():
    part, (rows, cols) = paste_masks(torch.ones(1, 1, 4, 4),
                                     torch.tensor([[50.0, 40.0, 60.0, 45.0]]), 32, 40)
    assert part.numel() == 0
    image = torch.zeros(1, 32, 40)
    image[(torch.tensor([0]), rows, cols)] = part
    assert image.sum() == 0


def test_chunks_one_per_mask_on_cpu_and_by_memory_on_gpu():
    cpu = _paste_chunks(5, 100, 100, torch.device('cpu'))
    assert [c.tolist() for c in cpu] == [[0], [1], [2], [3], [4]]
    # 10 masks of 8192 x 8192 floats are 2.5 GiB: 3 chunks of at most 1 GiB
    gpu = _paste_chunks(10, 8192, 8192, torch.device('meta'))
    assert [len(c) for c in gpu] == [4, 4, 2]
    # one mask over the limit on its own: one at a time (mmdet fails)
    assert len(_paste_chunks(2, 20000, 20000, torch.device('meta'))) == 2


def test_interpolating_upsample_takes_mmdets_own_mode_and_align_corners():
    """mmdet sets mode / align_corners of a 'bilinear' / 'nearest' upsample itself; a config
    spelling out the same values builds, a different one is refused (never silently replaced)."""
    head = _head(upsample_cfg=dict(type='bilinear', scale_factor=2, align_corners=False))
    assert head.upsample.mode == 'bilinear' and head.upsample.align_corners is False
    head = _head(upsample_cfg=dict(type='nearest', scale_factor=2, align_corners=None))
    assert head.upsample.mode == 'nearest' and head.upsample.align_corners is None
    with pytest.raises(ValueError, match='align_corners=False .*got align_corners=True'):
        _head(upsample_cfg=dict(type='bilinear', scale_factor=2, align_corners=True))
