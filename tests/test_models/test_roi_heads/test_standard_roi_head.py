import warnings

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from ckptzoo.core.bbox import bbox2roi
from ckptzoo.core.post_processing import multiclass_nms
from ckptzoo.registry import MODELS

from tests.helpers.checkpointing import one_thread

STRIDES = [4, 8, 16, 32]
TRAIN_CFG = dict(
    assigner=dict(type='MaxIoUAssigner', pos_iou_thr=0.5, neg_iou_thr=0.5, min_pos_iou=0.5,
                  match_low_quality=True, ignore_iof_thr=-1),
    sampler=dict(type='RandomSampler', num=16, pos_fraction=0.25, neg_pos_ub=-1,
                 add_gt_as_proposals=True),
    mask_size=14, pos_weight=-1, debug=False)
TEST_CFG = dict(score_thr=0.05, nms=dict(type='nms', iou_threshold=0.5), max_per_img=100,
                mask_thr_binary=0.5)
C = 4  # feature channels


class TinyMaskHead(nn.Module):
    """A stand-in for FCNMaskHead with its interface: a conv (with BN, to check buffers), the
    class logits; targets are each positive's gt mask (a tensor here)."""

    def __init__(self, num_classes=2):
        super().__init__()
        self.num_classes = num_classes
        self.conv = nn.Conv2d(C, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)
        self.conv_logits = nn.Conv2d(4, num_classes, 1)
        self.seen = []

    def forward(self, x):
        return self.conv_logits(F.relu(self.bn(self.conv(x))))

    def get_targets(self, sampling_results, gt_masks, rcnn_train_cfg):
        return torch.cat([masks[res.pos_assigned_gt_inds]
                          for res, masks in zip(sampling_results, gt_masks)])

    def loss(self, mask_pred, mask_targets, labels):
        pred = mask_pred[torch.arange(len(labels)), labels]
        size = pred.shape[-2:]
        targets = F.interpolate(mask_targets[:, None], size=size)[:, 0]
        return dict(loss_mask=F.binary_cross_entropy_with_logits(pred, targets))

    def get_seg_masks(self, mask_pred, det_bboxes, det_labels, rcnn_test_cfg, ori_shape,
                      scale_factor, rescale):
        self.seen.append((mask_pred.shape, det_bboxes.clone(), scale_factor, rescale))
        out = [[] for _ in range(self.num_classes)]
        for label in det_labels.tolist():
            out[label].append(np.zeros(ori_shape[:2], bool))
        return out


def _head(mask=False, shared=False, **kw):
    cfg = dict(
        type='StandardRoIHead',
        bbox_roi_extractor=dict(type='SingleRoIExtractor', out_channels=C,
                                roi_layer=dict(type='RoIAlign', output_size=7,
                                               sampling_ratio=0),
                                featmap_strides=STRIDES, finest_scale=8),
        bbox_head=dict(type='Shared2FCBBoxHead', in_channels=C, fc_out_channels=16,
                       roi_feat_size=7, num_classes=2,
                       bbox_coder=dict(type='DeltaXYWHBBoxCoder', target_means=[0.] * 4,
                                       target_stds=[0.1, 0.1, 0.2, 0.2]),
                       loss_cls=dict(type='CrossEntropyLoss', use_sigmoid=False,
                                     loss_weight=1.0),
                       loss_bbox=dict(type='L1Loss', loss_weight=1.0)),
        train_cfg=TRAIN_CFG, test_cfg=TEST_CFG)
    if mask:
        cfg['mask_head'] = dict(type=TinyMaskHead)
        if not shared:
            cfg['mask_roi_extractor'] = dict(
                type='SingleRoIExtractor', out_channels=C, featmap_strides=STRIDES,
                roi_layer=dict(type='RoIAlign', output_size=14, sampling_ratio=0),
                finest_scale=8)
    cfg.update(kw)
    torch.manual_seed(0)
    return MODELS.build(cfg)


def _meta(scale=1.0):
    return dict(img_shape=(64, 64, 3), ori_shape=(64, 64, 3), pad_shape=(64, 64, 3),
                scale_factor=np.full(4, scale, dtype=np.float32), flip=False)


def _inputs(seed=0):
    g = torch.Generator().manual_seed(seed)
    x = [torch.randn(2, C, 64 // s, 64 // s, generator=g) for s in STRIDES]
    props = []
    for _ in range(2):
        xy = torch.rand(24, 2, generator=g) * 40
        wh = torch.rand(24, 2, generator=g) * 30 + 4
        props.append(torch.cat([xy, xy + wh, torch.rand(24, 1, generator=g)], 1))
    gt_bboxes = [torch.tensor([[4., 4., 30., 36.]]),
                 torch.tensor([[10., 8., 20., 30.], [30., 28., 60., 60.]])]
    gt_labels = [torch.tensor([1]), torch.tensor([0, 1])]
    gt_masks = [(torch.rand(len(b), 14, 14, generator=g) > 0.5).float() for b in gt_bboxes]
    return x, props, gt_bboxes, gt_labels, gt_masks


@pytest.fixture(autouse=True)
def _one_thread():
    yield from one_thread()


def test_forward_train_is_mmdets_sequence():
    """Per image assign then sample (seeded draws), bbox2roi of positives then negatives,
    the extractor, the box head, get_targets and loss: the same numbers step by step."""
    head = _head()
    x, props, gt_bboxes, gt_labels, _ = _inputs()
    torch.manual_seed(5)
    losses = head.forward_train(x, [_meta()] * 2, props, gt_bboxes, gt_labels)
    assert list(losses) == ['loss_cls', 'acc', 'loss_bbox']
    torch.manual_seed(5)
    results = []
    for i in range(2):
        assign = head.bbox_assigner.assign(props[i], gt_bboxes[i], None, gt_labels[i])
        results.append(head.bbox_sampler.sample(assign, props[i], gt_bboxes[i], gt_labels[i]))
    assert results[1].pos_is_gt.sum() >= 1
    rois = bbox2roi([r.bboxes for r in results])
    cls_score, bbox_pred = head.bbox_head(head.bbox_roi_extractor(x, rois))
    targets = head.bbox_head.get_targets(results, gt_bboxes, gt_labels, TRAIN_CFG)
    expected = head.bbox_head.loss(cls_score, bbox_pred, rois, *targets)
    for key in expected:
        torch.testing.assert_close(losses[key], expected[key], rtol=0, atol=0)


def test_gt_bboxes_ignore_reaches_the_assigner(monkeypatch):
    head = _head(train_cfg=dict(TRAIN_CFG, assigner=dict(TRAIN_CFG['assigner'],
                                                         ignore_iof_thr=0.5),
                                sampler=dict(TRAIN_CFG['sampler'], num=200)))
    x, props, gt_bboxes, gt_labels, _ = _inputs()
    props = [torch.cat([p, torch.tensor([[50., 0., 60., 10., .5]])]) for p in props]
    seen = []
    sample = head.bbox_sampler.sample
    monkeypatch.setattr(head.bbox_sampler, 'sample', lambda *a, **k: seen.append(
        sample(*a, **k)) or seen[-1])
    head.forward_train(x, [_meta()] * 2, props, gt_bboxes, gt_labels,
                       gt_bboxes_ignore=[torch.tensor([[48., 0., 64., 12.]]), None])
    ignored = torch.tensor([50., 0., 60., 10.])
    assert not any((b == ignored).all() for b in seen[0].bboxes)  # ignored: not a negative
    assert any((b == ignored).all() for b in seen[1].bboxes)


def _loss(losses):
    return sum(v for k, v in losses.items() if k.startswith('loss'))


def _train_step(head, seed):
    head.zero_grad(set_to_none=True)
    x, props, gt_bboxes, gt_labels, gt_masks = _inputs()
    x = [f.requires_grad_() for f in x]
    torch.manual_seed(seed)
    losses = head.forward_train(x, [_meta()] * 2, props, gt_bboxes, gt_labels,
                                gt_masks=gt_masks)
    _loss(losses).backward()
    return ({k: v.detach() for k, v in losses.items()}, [f.grad for f in x],
            {n: p.grad for n, p in head.named_parameters()},
            {n: b.clone() for n, b in head.named_buffers()})


@pytest.mark.parametrize('shared', [False, True])
@pytest.mark.parametrize('mode, reentrant', [('full', False), ('selective', False),
                                             ('offload', False), ('full', True)])
def test_checkpoint_units_are_exact(mode, reentrant, shared, count_cp):
    """Every mode of ``bbox`` and ``mask``: the same losses, feature and parameter
    gradients and BN buffers as the plain run."""
    head = _head(mask=True, shared=shared, cp_use_reentrant=reentrant)
    assert list(head.checkpoint_units()) == ['bbox', 'mask']
    assert head.share_roi_extractor is shared
    ref = _train_step(head, seed=3)
    head.load_state_dict(_head(mask=True, shared=shared).state_dict())  # BN buffers back
    head.set_checkpoint_plan({'*': mode})
    with warnings.catch_warnings():
        warnings.filterwarnings('ignore', message=".*'offload'.*")
        got = _train_step(head, seed=3)
    if mode == 'full':
        assert count_cp['checkpoints'] == 2
    assert set(ref[0]) == {'loss_cls', 'acc', 'loss_bbox', 'loss_mask'}
    for key in ref[0]:
        torch.testing.assert_close(got[0][key], ref[0][key], rtol=0, atol=0)
    for a, b in zip(ref[1], got[1]):
        torch.testing.assert_close(b, a, rtol=0, atol=0)
    for name, grad in ref[2].items():
        assert grad is not None and grad.abs().sum() > 0, name
        torch.testing.assert_close(got[2][name], grad, rtol=0, atol=0, msg=name)
    for name, buf in ref[3].items():
        torch.testing.assert_close(got[3][name], buf, rtol=0, atol=0, msg=name)


def test_with_cp_and_units_without_mask():
    head = _head(with_cp=True)
    assert head.checkpoint_plan() == {'bbox': 'full'}
    with pytest.raises(TypeError, match='with_cp'):
        _head(with_cp='yes')


def test_shared_extractor_gives_the_mask_head_the_positives_box_features(monkeypatch):
    head = _head(mask=True, shared=True)
    x, props, gt_bboxes, gt_labels, gt_masks = _inputs()
    fed = []
    forward = head.mask_head.forward
    monkeypatch.setattr(head.mask_head, 'forward', lambda f: fed.append(f) or forward(f))
    seen = []
    sample = head.bbox_sampler.sample
    monkeypatch.setattr(head.bbox_sampler, 'sample', lambda *a, **k: seen.append(
        sample(*a, **k)) or seen[-1])
    head.forward_train(x, [_meta()] * 2, props, gt_bboxes, gt_labels, gt_masks=gt_masks)
    pos_rois = bbox2roi([r.pos_bboxes for r in seen])
    torch.testing.assert_close(fed[0], head.bbox_roi_extractor(x, pos_rois), rtol=0, atol=0)
    assert fed[0].shape[-2:] == (7, 7)
    with pytest.raises(ValueError, match='gt_masks'):
        head.forward_train(x, [_meta()] * 2, props, gt_bboxes, gt_labels)


def test_simple_test_rescale_and_per_class_results():
    head = _head(mask=True).eval()
    x, props, *_ = _inputs()
    metas = [_meta(2.0), _meta(2.0)]
    with torch.no_grad():
        dets, labels = head.simple_test_bboxes(x, metas, props, TEST_CFG)
        dets_r, labels_r = head.simple_test_bboxes(x, metas, props, TEST_CFG, rescale=True)
        results = head.simple_test(x, props, metas, rescale=True)
    for a, b in zip(dets, dets_r):
        torch.testing.assert_close(b[:, :4], a[:, :4] / 2)
        torch.testing.assert_close(b[:, 4], a[:, 4])
    assert len(results) == 2
    for (bbox_result, segm_result), d, lab in zip(results, dets_r, labels_r):
        assert len(bbox_result) == 2 and len(segm_result) == 2
        for c in range(2):
            np.testing.assert_allclose(bbox_result[c], d[lab == c].numpy())
            assert len(segm_result[c]) == int((lab == c).sum())
    # the mask RoIs are the detections mapped back to the network input
    _, boxes, scale_factor, rescale = head.mask_head.seen[0]
    torch.testing.assert_close(boxes, dets_r[0][:, :4] * 2)
    assert rescale and isinstance(scale_factor, torch.Tensor)


def test_simple_test_empty_proposals_and_detections():
    head = _head(mask=True).eval()
    x, props, *_ = _inputs()
    with torch.no_grad():
        results = head.simple_test(x, [props[0], torch.zeros(0, 5)], [_meta(), _meta()])
        assert [r.shape for r in results[1][0]] == [(0, 5), (0, 5)]
        assert results[1][1] == [[], []]
        none = head.simple_test(x, [torch.zeros(0, 5)] * 2, [_meta(), _meta()])
        for bbox_result, segm_result in none:
            assert [b.shape for b in bbox_result] == [(0, 5), (0, 5)]
            assert segm_result == [[], []]
        dets, labels = head.simple_test_bboxes(x, [_meta()] * 2, [torch.zeros(0, 5)] * 2, None)
        assert dets[0].shape == (0, 4) and labels[0].shape == (0, 3)


def test_forward_dummy():
    head = _head(mask=True)
    x, props, *_ = _inputs()
    cls_score, bbox_pred, mask_pred = head.forward_dummy([f[:1] for f in x], props[0])
    assert cls_score.shape == (24, 3) and bbox_pred.shape == (24, 8)
    assert mask_pred.shape == (24, 2, 14, 14)


def test_state_dict_keys():
    keys = list(_head(mask=True).state_dict())
    assert keys[:8] == ['bbox_head.fc_cls.weight', 'bbox_head.fc_cls.bias',
                        'bbox_head.fc_reg.weight', 'bbox_head.fc_reg.bias',
                        'bbox_head.shared_fcs.0.weight', 'bbox_head.shared_fcs.0.bias',
                        'bbox_head.shared_fcs.1.weight', 'bbox_head.shared_fcs.1.bias']
    assert all(k.startswith('mask_head.') for k in keys[8:])


def test_bad_configs_name_the_problem():
    with pytest.raises(KeyError, match="'train_cfg.mask_sise'.*did you mean"):
        _head(train_cfg=dict(TRAIN_CFG, mask_sise=28))
    with pytest.raises(KeyError, match="'test_cfg.score_thrs'"):
        _head(test_cfg=dict(TEST_CFG, score_thrs=0.1))
    with pytest.raises(ValueError, match='ResLayer stage'):  # shared heads: C4 models
        _head(shared_head=dict(type='ResLayer', depth=50, stage=0))
    with pytest.raises(ValueError, match='bbox_head'):
        MODELS.build(dict(type='StandardRoIHead'))
    head = _head(test_cfg=None).eval()
    x, props, *_ = _inputs()
    with pytest.raises(ValueError, match='test_cfg'):
        head.simple_test(x, props, [_meta()] * 2)
    with pytest.raises(ValueError, match='proposal_list'):
        _head().simple_test(x, props, [_meta()] * 2, proposals=props)
    with pytest.raises(ValueError, match='per augmentation, got 4 and 2'):
        _head().aug_test(x, props, [[_meta()]] * 2)
    with pytest.raises(ValueError, match='proposals of one image, got 2'):
        _head().aug_test([x], props, [[_meta()]])


FCN_MASK_HEAD = dict(type='FCNMaskHead', num_convs=1, roi_feat_size=14, in_channels=C,
                     conv_out_channels=4, num_classes=2)


def _view(scale, flip=False, ori=(32, 32, 3)):
    return dict(_meta(scale), ori_shape=ori, flip=flip,
                flip_direction='horizontal' if flip else None)


@pytest.mark.parametrize('rescale', [True, False])
@pytest.mark.parametrize('mask', [True, False])
def test_aug_test_of_one_view_is_simple_test(mask, rescale):
    """One view, twice the original's size: the proposals (original image) mapped into it,
    and the detections and masks mapped back, are simple_test's on that view."""
    head = _head(mask=mask, mask_head=FCN_MASK_HEAD).eval()
    x, props, *_ = _inputs()
    x = [f[:1] for f in x]
    meta = _view(2.0)
    original = props[0].clone()
    original[:, :4] /= 2
    with torch.no_grad():
        aug = head.aug_test([x], [original], [[meta]], rescale=rescale)
        simple = head.simple_test(x, [props[0]], [meta], rescale=rescale)
    assert len(aug) == len(simple) == 1
    (aug_boxes, aug_masks), (boxes, masks) = (aug[0], simple[0]) if mask \
        else ((aug[0], None), (simple[0], None))
    assert sum(len(b) for b in boxes) > 0
    for a, b in zip(aug_boxes, boxes):
        np.testing.assert_array_equal(a, b)
    if mask:
        for a, b in zip(aug_masks, masks):
            assert len(a) == len(b)
            for m, n in zip(a, b):
                assert m.shape == n.shape == ((32, 32) if rescale else (64, 64))
                np.testing.assert_array_equal(m, n)


def test_aug_test_of_a_mirrored_pair_cancels_horizontal_shifts_and_averages_masks():
    """A view and its mirror on features constant along x: both views see the same RoI
    features, so each class box's horizontal shift cancels in the mean (centred on its
    proposal), its width and y stay; the scores are the one view's. The mask of a detection
    is the mean of the view's probabilities and their mirror image, pasted at the original
    size with scale factors one."""
    head = _head(mask=True, mask_head=FCN_MASK_HEAD).eval()
    g = torch.Generator().manual_seed(3)
    with torch.no_grad():
        head.bbox_head.fc_reg.weight.normal_(0, 0.3, generator=g)
    x = [torch.randn(1, C, 64 // s, 1, generator=g).expand(-1, -1, -1, 64 // s).contiguous()
         for s in STRIDES]
    xy = torch.rand(16, 2, generator=g) * 16 + 16
    props = torch.cat([xy, xy + torch.rand(16, 2, generator=g) * 12 + 8,
                       torch.rand(16, 1, generator=g)], 1)  # in the 64 x 64 view
    views = [[_view(2.0)], [_view(2.0, flip=True)]]
    seen = []
    real = head.mask_head.get_seg_masks

    def capture(*args, **kwargs):
        seen.append((args, kwargs))
        return real(*args, **kwargs)
    head.mask_head.get_seg_masks = capture
    with torch.no_grad():
        rois = bbox2roi([props])
        out = head._bbox_forward(x, rois)
        boxes, scores = head.bbox_head.get_bboxes(rois, out['cls_score'], out['bbox_pred'],
                                                  (64, 64, 3), None, cfg=None)
        centre = (props[:, :1] + props[:, 2:3]) / 2
        # the one view's boxes do move sideways, and none is clipped at the image border
        assert ((boxes[:, 0::4] + boxes[:, 2::4]) / 2 - centre).abs().max() > 1
        assert boxes.min() > 1 and boxes.max() < 63
        half_w = (boxes[:, 2::4] - boxes[:, 0::4]) / 2
        expected = boxes.clone()
        expected[:, 0::4], expected[:, 2::4] = centre - half_w, centre + half_w
        want, want_labels = multiclass_nms(expected / 2, scores, TEST_CFG['score_thr'],
                                           TEST_CFG['nms'], TEST_CFG['max_per_img'])
        original = props.clone()
        original[:, :4] /= 2
        dets, labels = head.aug_test_bboxes([x, x], views, [original], TEST_CFG)
        (bbox_results, segm_results), = head.aug_test([x, x], [original], views, rescale=True)
        probs = head._mask_forward(x, bbox2roi([dets[:, :4] * 2]))['mask_pred'].sigmoid()
    assert len(want) > 1
    torch.testing.assert_close(dets, want)
    assert labels.tolist() == want_labels.tolist()
    for c in range(2):
        np.testing.assert_allclose(bbox_results[c], dets[labels == c].numpy())
        assert len(segm_results[c]) == int((labels == c).sum())
        assert all(m.shape == (32, 32) for m in segm_results[c])
    (merged, boxes, *_, ori_shape), kwargs = seen[0]
    probs = probs.numpy()
    assert np.abs(probs - probs[..., ::-1]).max() > 1e-3  # the mirror changes the masks
    np.testing.assert_allclose(merged, (probs + probs[..., ::-1]) / 2, atol=1e-6)
    torch.testing.assert_close(boxes, dets)
    assert ori_shape == (32, 32, 3) and kwargs['rescale'] is False
    assert kwargs['scale_factor'].tolist() == [1., 1., 1., 1.]


def test_aug_test_without_proposals_detects_nothing():
    head = _head(mask=True).eval()
    x, *_ = _inputs()
    x = [f[:1] for f in x]
    with torch.no_grad():
        (bbox_results, segm_results), = head.aug_test([x, x], [torch.zeros(0, 5)],
                                                      [[_view(1.0)], [_view(1.0, True)]])
    assert [b.shape for b in bbox_results] == [(0, 5), (0, 5)]
    assert segm_results == [[], []]


def test_images_without_ground_truth():
    """No gts: every sampled RoI is background (16 per image), loss_bbox is a zero that
    still has a graph."""
    head = _head()
    x, props, *_ = _inputs()
    no_gt = [torch.zeros(0, 4)] * 2, [torch.zeros(0, dtype=torch.long)] * 2
    losses = head.forward_train(x, [_meta()] * 2, props, *no_gt)
    assert losses['loss_bbox'] == 0 and losses['loss_bbox'].requires_grad
    assert 0 <= losses['acc'].item() <= 100 and losses['loss_cls'] > 0


@pytest.mark.parametrize('pack', ['DeformRoIPoolPack', 'ModulatedDeformRoIPoolPack'])
@pytest.mark.parametrize('mode, reentrant', [('full', False), ('selective', False),
                                             ('offload', False), ('full', True)])
def test_checkpoint_units_with_deformable_roi_pooling(pack, mode, reentrant, count_cp):
    """dcn/dcnv2 dpool configs: the RoI layers learn offsets, inside the ``bbox`` unit; every
    mode gives the plain run's losses and gradients (the offset MLPs' too)."""
    extractor = dict(type='SingleRoIExtractor', out_channels=C, featmap_strides=STRIDES,
                     finest_scale=8, roi_layer=dict(type=pack, output_size=7,
                                                    output_channels=C, deform_fc_channels=8))

    def build():
        head = _head(bbox_roi_extractor=extractor, cp_use_reentrant=reentrant)
        g = torch.Generator().manual_seed(1)
        for name, p in head.named_parameters():  # non-zero offsets and masks
            if name.endswith(('offset_fc.4.weight', 'mask_fc.2.weight')):
                p.data.copy_(torch.randn(p.shape, generator=g) * 0.05)
        return head

    head = build()
    assert list(head.checkpoint_units()) == ['bbox']
    assert any('roi_layers.3.offset_fc' in n for n, _ in head.named_parameters())
    ref = _train_step(head, seed=3)
    head.load_state_dict(build().state_dict())
    head.set_checkpoint_plan({'*': mode})
    with warnings.catch_warnings():
        warnings.filterwarnings('ignore', message=".*'offload'.*")
        got = _train_step(head, seed=3)
    if mode == 'full':
        assert count_cp['checkpoints'] == 1
    for key in ref[0]:
        torch.testing.assert_close(got[0][key], ref[0][key], rtol=0, atol=0)
    for a, b in zip(ref[1], got[1]):
        torch.testing.assert_close(b, a, rtol=0, atol=0)
    assert ref[2]['bbox_roi_extractor.roi_layers.0.offset_fc.0.weight'].abs().sum() > 0
    for name, grad in ref[2].items():
        assert grad is not None, name  # levels without RoIs: zero, as mmdet
        torch.testing.assert_close(got[2][name], grad, rtol=0, atol=0, msg=name)
