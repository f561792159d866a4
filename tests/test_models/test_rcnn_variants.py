"""Double-Head, GRoIE, Libra (FPN + BFP neck list), Dynamic and PISA R-CNN on a tiny model:
mmdet's loss keys and state-dict keys, every checkpoint mode exact on every unit, the dynamic
hyperparameter updates. (Audited against mmdet 2.28.2 on the same weights: exact.)"""
import copy

import pytest
import torch

from ckptzoo.registry import build_detector

from tests.helpers.checkpointing import one_thread
from tests.helpers.detectors import cascade_cfg, det_batch

one_thread = pytest.fixture(autouse=True)(one_thread)

FEAT = 16
FPN = dict(type='FPN', in_channels=[8, 16, 32, 64], out_channels=FEAT, num_outs=5)


def faster_cfg(roi_head=None, neck=None, rcnn=None):
    cfg = cascade_cfg(with_mask=False, num_stages=1)
    cfg['type'] = 'FasterRCNN'
    rh = cfg['roi_head']
    cfg['roi_head'] = dict(dict(type='StandardRoIHead',
                                bbox_roi_extractor=rh['bbox_roi_extractor'],
                                bbox_head=dict(rh['bbox_head'][0], reg_class_agnostic=False)),
                           **(roi_head or {}))
    cfg['train_cfg']['rcnn'] = dict(cfg['train_cfg']['rcnn'][0], **(rcnn or {}))
    if neck is not None:
        cfg['neck'] = neck
    return cfg


DOUBLE = dict(type='DoubleHeadRoIHead', reg_roi_scale_factor=1.3,
              bbox_head=dict(type='DoubleConvFCBBoxHead', num_convs=2, num_fcs=2,
                             in_channels=FEAT, conv_out_channels=16, fc_out_channels=32,
                             num_classes=3))
GROIE = dict(bbox_roi_extractor=dict(
    type='GenericRoIExtractor', aggregation='sum',
    roi_layer=dict(type='RoIAlign', output_size=7, sampling_ratio=2), out_channels=FEAT,
    featmap_strides=[4, 8, 16, 32],
    pre_cfg=dict(type='ConvModule', in_channels=FEAT, out_channels=FEAT, kernel_size=5,
                 padding=2, inplace=False),
    post_cfg=dict(type='ConvModule', in_channels=FEAT, out_channels=FEAT, kernel_size=3,
                  padding=1)))
LIBRA = [FPN, dict(type='BFP', in_channels=FEAT, num_levels=5, refine_level=2,
                   refine_type='non_local')]
DYNAMIC = dict(dynamic_rcnn=dict(iou_topk=7, beta_topk=3, update_iter_interval=2,
                                 initial_iou=0.4, initial_beta=1.0))
VARIANTS = {
    'double': dict(roi_head=DOUBLE),
    'groie': dict(roi_head=GROIE),
    'libra': dict(neck=LIBRA),
    'libra_conv': dict(neck=[FPN, dict(LIBRA[1], refine_type='conv',
                                       norm_cfg=dict(type='BN'))]),
    'dynamic': dict(roi_head=dict(type='DynamicRoIHead'), rcnn=DYNAMIC),
    'pisa': dict(roi_head=dict(type='PISARoIHead'),
                 rcnn=dict(isr=dict(k=2, bias=0), carl=dict(k=1, bias=0.2))),
    # ISR-N: the negatives picked and weighted by ScoreHLRSampler (pisa_faster_rcnn's)
    'pisa_hlr': dict(roi_head=dict(type='PISARoIHead'),
                     rcnn=dict(sampler=dict(type='ScoreHLRSampler', num=32, pos_fraction=0.25,
                                            neg_pos_ub=-1, add_gt_as_proposals=True, k=0.5,
                                            bias=0., score_thr=0.05),
                               isr=dict(k=2, bias=0), carl=dict(k=1, bias=0.2))),
}


def _model(name):
    torch.manual_seed(0)
    return build_detector(faster_cfg(**VARIANTS[name]))


def _step(model, seed=7):
    model.zero_grad(set_to_none=True)
    torch.manual_seed(seed)
    out = model.train_step(copy.deepcopy(det_batch()), None)
    out['loss'].backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return out['log_vars'], grads, {n: b.clone() for n, b in model.named_buffers()}


@pytest.mark.parametrize('name', sorted(VARIANTS))
def test_train_step_and_test(name):
    model = _model(name)
    log_vars, grads, _ = _step(model)
    keys = ['loss_rpn_cls', 'loss_rpn_bbox', 'loss_cls', 'acc', 'loss_bbox']
    assert list(log_vars) == keys + (['loss_carl'] if name.startswith('pisa') else []) + [
        'loss']
    assert all(torch.isfinite(torch.tensor(v)) for v in log_vars.values())
    assert any(n.startswith('roi_head.bbox_head.') for n in grads)
    model.eval()
    batch = det_batch()
    with torch.no_grad():
        result = model.simple_test(batch['img'], batch['img_metas'], rescale=True)
    assert len(result) == 2 and len(result[0]) == 3


def test_state_dict_keys_are_mmdets():
    keys = set(_model('double').state_dict())
    assert {'roi_head.bbox_head.res_block.conv1.conv.weight',
            'roi_head.bbox_head.res_block.conv1.bn.running_mean',
            'roi_head.bbox_head.res_block.conv_identity.conv.weight',
            'roi_head.bbox_head.conv_branch.1.conv3.weight', 'roi_head.bbox_head.conv_branch.1.bn3.weight',
            'roi_head.bbox_head.fc_branch.1.weight', 'roi_head.bbox_head.fc_cls.weight',
            'roi_head.bbox_head.fc_reg.weight'} <= keys
    keys = list(_model('groie').state_dict())
    i = keys.index('roi_head.bbox_roi_extractor.post_module.conv.weight')
    assert keys[i + 2] == 'roi_head.bbox_roi_extractor.pre_module.conv.weight'
    keys = set(_model('libra').state_dict())
    assert {'neck.0.lateral_convs.0.conv.weight', 'neck.1.refine.g.conv.weight',
            'neck.1.refine.theta.conv.weight', 'neck.1.refine.phi.conv.weight',
            'neck.1.refine.conv_out.conv.weight'} <= keys


def test_libra_units_in_execution_order():
    units = list(_model('libra').checkpoint_units())
    neck = [u for u in units if u.startswith('neck.')]
    assert neck == ['neck.0.level3', 'neck.0.level2', 'neck.0.level1', 'neck.0.level0',
                    'neck.1.gather', 'neck.1.refine', 'neck.1.scatter']
    assert ['neck.1.gather', 'neck.1.refine', 'neck.1.scatter'] in \
        _model('libra').checkpoint_chains()


@pytest.mark.parametrize('name', ['double', 'groie', 'libra_conv', 'pisa', 'pisa_hlr'])
@pytest.mark.parametrize('mode', ['full', 'selective', 'offload', 'segment'])
def test_every_checkpoint_mode_is_exact(name, mode):
    """Outputs, every gradient and the BN buffers equal the plain run's."""
    ref = _step(_model(name))
    model = _model(name)
    if mode == 'segment':
        model.set_checkpoint_segments([['neck.1.gather', 'neck.1.scatter']]
                                      if name.startswith('libra') else [])
        model.set_checkpoint_plan({'roi_head': 'full'})
    else:
        model.set_checkpoint_plan({'neck': mode, 'roi_head': mode})
    got = _step(model)
    assert got[0] == ref[0]
    for a, b in zip(ref[1:], got[1:]):
        assert a.keys() == b.keys()
        for k in a:
            torch.testing.assert_close(b[k], a[k], rtol=0, atol=0, msg=k)


def test_dynamic_updates_iou_threshold_and_beta():
    model = _model('dynamic')
    head = model.roi_head
    assert head.bbox_assigner.pos_iou_thr == 0.5 and head.bbox_head.loss_bbox.beta == 1.0
    _step(model)
    assert len(head.iou_history) == 1 and len(head.beta_history) == 1
    ious, betas = list(head.iou_history), None
    betas = list(head.beta_history)
    _step(model, seed=8)  # the second call updates (update_iter_interval=2)
    assert head.iou_history == [] and head.beta_history == []
    assert head.bbox_assigner.pos_iou_thr == head.bbox_assigner.neg_iou_thr \
        == head.bbox_assigner.min_pos_iou >= 0.4
    assert 0 < head.bbox_head.loss_bbox.beta <= 1.0
    assert ious and betas


def test_dynamic_needs_smooth_l1_and_its_cfg():
    cfg = faster_cfg(**VARIANTS['dynamic'])
    cfg['roi_head']['bbox_head']['loss_bbox'] = dict(type='L1Loss')
    with pytest.raises(TypeError, match='SmoothL1Loss'):
        build_detector(cfg)
    cfg = faster_cfg(roi_head=dict(type='DynamicRoIHead'), rcnn=dict(
        dynamic_rcnn=dict(iou_topk=7)))
    with pytest.raises(ValueError, match='beta_topk'):
        build_detector(cfg)


def test_groie_takes_a_context_block_post_cfg():
    cfg = faster_cfg(roi_head=copy.deepcopy(GROIE))
    cfg['roi_head']['bbox_roi_extractor']['post_cfg'] = dict(
        type='ContextBlock', in_channels=FEAT, ratio=0.25)
    keys = build_detector(cfg).state_dict()
    assert 'roi_head.bbox_roi_extractor.post_module.conv_mask.weight' in keys
