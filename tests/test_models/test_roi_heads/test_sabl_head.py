"""SABLHead (mmdet 2.28.2's side-aware boundary localization box head): mmdet's state-dict
layout, the side-aware split, bad configs refused, targets and losses, the cascade refine,
and Faster / Cascade R-CNN with SABL heads end to end with every checkpoint mode of the box
units (the head runs inside them) exact."""
import copy

import pytest
import torch

from ckptzoo.core.bbox import SamplingResult
from ckptzoo.registry import MODELS, build_detector

from tests.helpers.checkpointing import one_thread
from tests.helpers.detectors import img_meta
from tests.helpers.sabl import sabl_cascade_cfg, sabl_faster_cfg, sabl_head_cfg

one_thread = pytest.fixture(autouse=True)(one_thread)

# mmdet's sabl_faster_rcnn_r50_fpn_1x_coco bbox_head, its keys and shapes in mmdet's order
MMDET_KEYS = [
    ('cls_fcs.0.weight', (1024, 12544)), ('cls_fcs.0.bias', (1024, )),
    ('upsample_x.weight', (256, 256, 2)), ('upsample_x.bias', (256, )),
    ('upsample_y.weight', (256, 256, 2)), ('upsample_y.bias', (256, )),
    ('reg_pre_convs.0.conv.weight', (256, 256, 3, 3)), ('reg_pre_convs.0.conv.bias', (256, )),
    ('reg_pre_convs.1.conv.weight', (256, 256, 3, 3)), ('reg_pre_convs.1.conv.bias', (256, )),
    ('reg_post_conv_xs.0.conv.weight', (256, 256, 1, 3)),
    ('reg_post_conv_xs.0.conv.bias', (256, )),
    ('reg_post_conv_ys.0.conv.weight', (256, 256, 3, 1)),
    ('reg_post_conv_ys.0.conv.bias', (256, )),
    ('reg_conv_att_x.weight', (1, 256, 1, 1)), ('reg_conv_att_x.bias', (1, )),
    ('reg_conv_att_y.weight', (1, 256, 1, 1)), ('reg_conv_att_y.bias', (1, )),
    ('fc_cls.weight', (81, 1024)), ('fc_cls.bias', (81, )),
    ('fc_reg_cls.weight', (1, 256)), ('fc_reg_cls.bias', (1, )),
    ('fc_reg_offset.weight', (1, 256)), ('fc_reg_offset.bias', (1, ))]


def _head(**kw):
    torch.manual_seed(0)
    return MODELS.build(sabl_head_cfg(**kw))


def test_mmdet_default_head_has_mmdets_keys_and_shapes():
    with torch.device('meta'):
        head = MODELS.build(dict(type='SABLHead', num_classes=80))
    assert [(k, tuple(v.shape)) for k, v in head.state_dict().items()] == MMDET_KEYS
    head = _head(num_reg_fcs=2, norm_cfg=dict(type='GN', num_groups=4))
    keys = list(head.state_dict())
    assert 'reg_cls_fcs.1.weight' in keys and 'reg_offset_fcs.0.bias' in keys
    assert 'reg_pre_convs.0.gn.weight' in keys


def test_forward_shapes_and_side_aware_split():
    head = _head()
    cls_score, (bucket_cls, bucket_offset) = head(torch.randn(5, 16, 7, 7))
    assert cls_score.shape == (5, 4) and bucket_cls.shape == bucket_offset.shape == (5, 28)
    feat = torch.arange(14.)[None]  # positions left to right
    split = head.side_aware_split(feat)
    assert split[0, :7].tolist() == list(range(7))  # low side, from its edge inwards
    assert split[0, 7:].tolist() == list(range(13, 6, -1))  # high side, from its edge
    pairs = head.bbox_pred_split((bucket_cls, bucket_offset), (2, 3))
    assert [p[0].shape[0] for p in pairs] == [2, 3]


@pytest.mark.parametrize('kw, match', [
    (dict(reg_feat_up_ratio=1), 'reg_feat_up_ratio must be at least 2'),
    (dict(roi_feat_size=6), r'roi_feat_size \* reg_feat_up_ratio \(12\) must equal'),
    (dict(reg_class_agnostic=False), 'class-agnostically')])
def test_bad_configs_are_refused(kw, match):
    with pytest.raises(ValueError, match=match):
        _head(**kw)


def _sampling_result():
    bboxes = torch.tensor([[8., 10., 40., 50.], [6., 8., 38., 46.], [0., 0., 20., 20.]])
    gt = torch.tensor([[8., 10., 40., 50.]])
    from ckptzoo.core.bbox import AssignResult
    assign = AssignResult(1, torch.tensor([1, 1, 0]), torch.ones(3),
                          labels=torch.tensor([2, 2, -1]))
    return SamplingResult(torch.tensor([0, 1]), torch.tensor([2]), bboxes, gt, assign,
                          torch.tensor([1, 0, 0], dtype=torch.uint8))


def test_targets_and_losses():
    head = _head()
    res = _sampling_result()
    labels, label_w, (cls_t, off_t), (cls_w, off_w) = head.get_targets([res], None, None, {})
    assert labels.tolist() == [2, 2, 3] and label_w.tolist() == [1, 1, 1]
    assert cls_t.shape == off_t.shape == (3, 28)
    assert cls_t[:2].view(2, 4, 7).sum(-1).eq(1).all() and cls_t[2].eq(0).all()
    assert off_w[2].eq(0).all() and cls_w[2].eq(0).all()  # negatives: no box targets
    cls_score, bbox_pred = head(torch.randn(3, 16, 7, 7))
    losses = head.loss(cls_score, bbox_pred, None, labels, label_w, (cls_t, off_t),
                       (cls_w, off_w))
    assert list(losses) == ['loss_cls', 'acc', 'loss_bbox_cls', 'loss_bbox_reg']
    # bucket classification averaged over (RoI, side) pairs, offsets over the RoIs
    bce = torch.nn.functional.binary_cross_entropy_with_logits(
        bbox_pred[0], cls_t, cls_w, reduction='sum') / 12
    torch.testing.assert_close(losses['loss_bbox_cls'], bce)


def test_refine_drops_the_ground_truths_and_regress_keeps_the_index():
    head = _head()
    rois = torch.tensor([[0., 8., 10., 40., 50.], [0., 6., 8., 38., 46.],
                         [1., 0., 0., 20., 20.]])
    _, bbox_pred = head(torch.randn(3, 16, 7, 7))
    out = head.refine_bboxes(rois, torch.tensor([0, 1, 2]), bbox_pred,
                             [torch.tensor([1, 0], dtype=torch.uint8),
                              torch.tensor([], dtype=torch.uint8)], [img_meta(), img_meta()])
    assert [o.shape for o in out] == [(1, 4), (1, 4)]
    full = head.regress_by_class(rois, None, bbox_pred, img_meta())
    assert full.shape == (3, 5) and full[:, 0].tolist() == [0, 0, 1]
    torch.testing.assert_close(full[1, 1:], out[0][0])
    with pytest.raises(ValueError, match='must name each of the 3 images'):
        head.refine_bboxes(rois, torch.tensor([0, 1, 2]), bbox_pred,
                           [torch.tensor([1, 0], dtype=torch.uint8)] * 3, [img_meta()] * 3)


def _batch():
    g = torch.Generator().manual_seed(0)
    return dict(img=torch.randn(2, 3, 64, 64, generator=g),
                img_metas=[img_meta(), img_meta(56, 60)],
                gt_bboxes=[torch.tensor([[8., 10., 40., 50.], [30., 4., 60., 30.]]),
                           torch.tensor([[5., 5., 52., 52.]])],
                gt_labels=[torch.tensor([0, 2]), torch.tensor([1])])


def _step(model, batch, seed=7):
    model.zero_grad(set_to_none=True)
    torch.manual_seed(seed)
    out = model.train_step(copy.deepcopy(batch), None)
    out['loss'].backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return out['log_vars'], grads, {n: b.clone() for n, b in model.named_buffers()}


CFGS = {'faster': sabl_faster_cfg, 'cascade': sabl_cascade_cfg}


@pytest.mark.filterwarnings('ignore:checkpoint mode .offload.')
@pytest.mark.parametrize('kind', ['faster', 'cascade'])
def test_train_step_and_every_mode_of_the_box_units_equal_plain(kind):
    torch.manual_seed(0)
    plain = build_detector(CFGS[kind]())
    units = [u for u in plain.checkpoint_units() if u.startswith('roi_head')]
    assert units == (['roi_head.bbox'] if kind == 'faster'
                     else ['roi_head.bbox.0', 'roi_head.bbox.1', 'roi_head.bbox.2'])
    state = copy.deepcopy(plain.state_dict())
    ref = _step(plain, _batch())
    stages = [''] if kind == 'faster' else ['s0.', 's1.', 's2.']
    assert [k for k in ref[0] if 'rpn' not in k and k != 'loss'] == [
        f'{s}{k}' for s in stages for k in ('loss_cls', 'acc', 'loss_bbox_cls', 'loss_bbox_reg')]
    head_params = [n for n, _ in plain.named_parameters() if n.startswith('roi_head')]
    assert set(head_params) <= set(ref[1])  # every box-head parameter gets a gradient
    for mode, reentrant in (('full', False), ('full', True), ('selective', False),
                            ('offload', False)):
        cfg = CFGS[kind]()
        cfg['roi_head']['cp_use_reentrant'] = reentrant
        model = build_detector(cfg)
        model.load_state_dict(state)
        model.set_checkpoint_plan({'roi_head': mode})
        log, grads, bufs = _step(model, _batch())
        assert log == pytest.approx(ref[0], rel=1e-6, abs=1e-7)
        assert grads.keys() == ref[1].keys(), (mode, reentrant)
        for name, grad in ref[1].items():
            torch.testing.assert_close(grads[name], grad, rtol=0, atol=1e-6,
                                       msg=lambda m: f'{mode} {reentrant} {name}: {m}')
        for name, buf in ref[2].items():
            torch.testing.assert_close(bufs[name], buf, rtol=0, atol=0)


@pytest.mark.parametrize('kind', ['faster', 'cascade'])
def test_simple_test_gives_mmdets_results_rescored_by_bucket_confidence(kind):
    torch.manual_seed(0)
    model = build_detector(CFGS[kind](score_thr=0.0)).eval()
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        results = model.simple_test(torch.randn(2, 3, 64, 64, generator=g),
                                    [img_meta(), img_meta(56, 60)], rescale=True)
    assert len(results) == 2 and all(len(r) == 3 for r in results)
    dets = [d for r in results for d in r]
    assert sum(len(d) for d in dets) > 0 and all(d.shape[1] == 5 for d in dets)
    # scores are the class probability times the localisation confidence (< 1)
    assert max(float(d[:, 4].max()) for d in dets if len(d)) < 1
