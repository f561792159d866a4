"""The C4 shared head (``ResLayer``) in ``StandardRoIHead``: mmdet's keys, norm_eval, the
block units (``roi_head.shared_head.layer4.{j}``, one chain) exact in every mode and under a
segment, the C4 Faster / Mask R-CNN end to end. The audit against mmdet 2.28.2 (same weights,
batch and seed) found losses, gradients, BN buffers, detections and masks equal."""
import copy

import pytest
import torch

from ckptzoo.models.backbones import ResNet
from ckptzoo.models.roi_heads import ResLayer
from ckptzoo.registry import build_detector

from tests.helpers.checkpointing import one_thread
from tests.helpers.rcnn_variants import c4_cfg, masks_batch, train_step

one_thread = pytest.fixture(autouse=True)(one_thread)
SHARED = ['roi_head.shared_head.layer4.0', 'roi_head.shared_head.layer4.1']


def _model(with_mask=False):
    torch.manual_seed(0)
    return build_detector(c4_cfg(with_mask))


def _batch(with_mask):
    batch = masks_batch()
    if not with_mask:
        batch.pop('gt_masks')
    return batch


def test_keys_are_mmdets_and_a_resnet_stage_loads(tmp_path):
    head = ResLayer(50, stage=3, style='caffe')
    keys = list(head.state_dict())
    assert keys[0] == 'layer4.0.conv1.weight' and 'layer4.0.downsample.0.weight' in keys
    assert head.state_dict()['layer4.0.conv1.weight'].shape == (512, 1024, 1, 1)
    assert head.layer4[0].conv1.stride == (2, 2)  # caffe style: the stride on the 1x1 conv
    # a whole ResNet-50 checkpoint: its layer4 loads, the rest is not the head's
    ckpt = ResNet(50, style='caffe').state_dict()
    ckpt['layer4.0.conv1.weight'] = torch.ones(512, 1024, 1, 1)
    torch.save({'state_dict': ckpt}, tmp_path / 'r50.pth')
    head = ResLayer(50, init_cfg=dict(type='Pretrained', checkpoint=str(tmp_path / 'r50.pth')))
    head.init_weights()
    assert head.layer4[0].conv1.weight.eq(1).all()
    torch.testing.assert_close(head.layer4[2].conv3.weight, ckpt['layer4.2.conv3.weight'])


def test_norm_eval_keeps_the_batchnorms_in_eval_mode():
    head = ResLayer(18, stage=3).train()
    assert all(not m.training for m in head.modules() if isinstance(m, torch.nn.BatchNorm2d))
    assert ResLayer(18, stage=3, norm_eval=False).train().layer4[0].bn1.training


def test_arguments_are_checked():
    with pytest.raises(ValueError, match='depth'):
        ResLayer(42)
    with pytest.raises(ValueError, match='stage'):
        ResLayer(50, stage=0)
    with pytest.raises(ValueError, match='dcn must be None or a conv layer config dict'):
        ResLayer(50, dcn='DCNv2')
    with pytest.raises(ValueError, match='init_cfg or pretrained'):
        ResLayer(50, pretrained='x.pth', init_cfg=dict(type='Pretrained', checkpoint='y'))


@pytest.mark.parametrize('with_mask', [False, True])
def test_c4_train_step_and_units(with_mask):
    model = _model(with_mask)
    units = [u for u in model.checkpoint_units() if u.startswith('roi_head')]
    assert units == SHARED + ['roi_head.bbox'] + (['roi_head.mask'] if with_mask else [])
    assert SHARED in model.checkpoint_chains()
    log_vars, grads, _ = train_step(model, _batch(with_mask))
    assert ('loss_mask' in log_vars) == with_mask
    shared = [n for n, p in model.named_parameters() if 'shared_head' in n]
    assert shared and all(grads[n].abs().sum() > 0 for n in shared)
    cfg = c4_cfg(with_mask)
    cfg['roi_head']['shared_head']['with_cp'] = True
    plan = build_detector(cfg).checkpoint_plan()
    assert [plan[u] for u in SHARED] == ['full', 'full'] and plan['roi_head.bbox'] is None


@pytest.mark.filterwarnings('ignore:checkpoint mode .offload.')
@pytest.mark.parametrize('mode', ['full', 'selective', 'offload', 'segment'])
def test_every_mode_on_the_c4_roi_units_equals_plain(mode):
    plain = _model(True)
    state = copy.deepcopy(plain.state_dict())
    ref = train_step(plain, _batch(True))
    model = _model(True)
    model.load_state_dict(state)
    if mode == 'segment':
        model.set_checkpoint_segments([SHARED])
    else:
        model.set_checkpoint_plan({'roi_head': mode})
    got = train_step(model, _batch(True))
    assert got[0] == pytest.approx(ref[0], rel=1e-6, abs=1e-7)
    assert got[1].keys() == ref[1].keys()
    for name, grad in ref[1].items():
        torch.testing.assert_close(got[1][name], grad, rtol=0, atol=1e-6)
    for name, buf in ref[2].items():
        torch.testing.assert_close(got[2][name], buf, rtol=0, atol=0)


def test_c4_test_masks_go_through_the_shared_head():
    model = _model(True).eval()
    model.test_cfg['rcnn']['score_thr'] = 0.0
    calls = []
    model.roi_head.shared_head.layer4[0].register_forward_hook(lambda *a: calls.append(1))
    with torch.no_grad():
        [(bbox_results, segms)] = model.simple_test(torch.randn(1, 3, 64, 64),
                                                    masks_batch()['img_metas'][:1])
    assert len(calls) == 2 and sum(map(len, segms)) == sum(map(len, bbox_results)) > 0


def test_dcn_makes_every_conv2_deformable_as_mmdet():
    from ckptzoo.ops import ModulatedDeformConv2dPack
    head = ResLayer(50, dcn=dict(type='DCNv2', deform_groups=1, fallback_on_stride=False))
    assert all(type(b.conv2) is ModulatedDeformConv2dPack for b in head.layer4)
    assert not head.layer4[0].conv2.conv_offset.weight.any()  # offsets start at zero
    assert 'layer4.0.conv2.conv_offset.weight' in head.state_dict()
