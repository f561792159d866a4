"""FCOS end to end on a tiny model: mmdet's loss keys and state-dict keys, train step with and
without boxes, every checkpoint mode on the head's levels, results, and mmdet 2.x's FCOS
r50 config's keys."""
import numpy as np
import pytest

from ckptzoo.models import FCOS
from tests.helpers.anchor_free import (assert_every_mode_exact, assert_result_format, batch,
                                       build, detector_cfg, step)
from tests.helpers.checkpointing import one_thread

one_thread = pytest.fixture(autouse=True)(one_thread)


def _cfg(**head_kw):
    head = dict(type='FCOSHead', num_classes=3, in_channels=16, stacked_convs=2,
                feat_channels=16, strides=[8, 16, 32, 64, 128],
                norm_cfg=dict(type='GN', num_groups=4, requires_grad=True),
                regress_ranges=((-1, 32), (0, 64), (0, 64), (0, 1e8), (0, 1e8)),
                loss_cls=dict(type='FocalLoss', use_sigmoid=True, gamma=2.0, alpha=0.25,
                              loss_weight=1.0),
                loss_bbox=dict(type='IoULoss', loss_weight=1.0),
                loss_centerness=dict(type='CrossEntropyLoss', use_sigmoid=True,
                                     loss_weight=1.0))
    head.update(head_kw)
    return detector_cfg('FCOS', head)


TRICKS = dict(norm_on_bbox=True, centerness_on_reg=True, center_sampling=True, conv_bias=True,
              loss_bbox=dict(type='GIoULoss', loss_weight=1.0))


@pytest.mark.parametrize('head_kw', [{}, TRICKS], ids=['plain', 'tricks'])
def test_train_step_with_and_without_boxes(head_kw):
    model = build(_cfg(**head_kw))
    assert isinstance(model, FCOS)
    log, grads, _ = step(model, batch())
    assert list(log) == ['loss_cls', 'loss_bbox', 'loss_centerness', 'loss']
    assert all(np.isfinite(v) for v in log.values()) and log['loss_bbox'] > 0
    # every parameter learns, the five scales included
    assert set(grads) == {n for n, _ in model.named_parameters()}
    assert all(grads[f'bbox_head.scales.{i}.scale'].abs() > 0 for i in range(4))
    log, grads, _ = step(model, batch(empty_second=True))
    assert all(np.isfinite(v) for v in log.values())


@pytest.mark.filterwarnings('ignore:checkpoint mode .offload.')
@pytest.mark.parametrize('mode', [None, 'full', 'selective', 'offload'])
def test_every_mode_on_the_head_levels_equals_plain(monkeypatch, mode):
    assert_every_mode_exact(monkeypatch, _cfg(**TRICKS), mode)


def test_with_cp_checkpoints_every_level():
    cfg = _cfg()
    cfg['bbox_head']['with_cp'] = True
    plan = build(cfg).checkpoint_plan()
    assert [plan[f'bbox_head.level{i}'] for i in range(5)] == ['full'] * 5


def test_results_format():
    assert_result_format(build(_cfg(**TRICKS)))


def test_mmdet_fcos_r50_state_dict_keys():
    """mmdet 2.x fcos_r50_caffe_fpn_gn-head_1x_coco's head keys (GN towers without conv bias,
    five scales); the whole config builds in tests/test_configs_mmdet_fcos.py."""
    from ckptzoo.registry import build_head
    head = build_head(dict(type='FCOSHead', num_classes=80, in_channels=256, stacked_convs=4,
                           feat_channels=256, strides=[8, 16, 32, 64, 128]))
    keys = set(head.state_dict())
    tower = {f'{t}_convs.{i}.{k}' for t in ('cls', 'reg') for i in range(4)
             for k in ('conv.weight', 'gn.weight', 'gn.bias')}
    assert keys == tower | {'conv_cls.weight', 'conv_cls.bias', 'conv_reg.weight',
                            'conv_reg.bias', 'conv_centerness.weight', 'conv_centerness.bias'
                            } | {f'scales.{i}.scale' for i in range(5)}
    assert head.conv_cls.weight.shape == (80, 256, 3, 3)


def test_fp16_distances_are_float32():
    """Under fp16 the towers run in half precision; the distances are made float32 before
    ``exp`` (mmdet's ``.float()``), the losses are float32 and finite."""
    import torch

    from ckptzoo.runner.fp16 import wrap_fp16_model
    model = wrap_fp16_model(build(_cfg()))
    seen = []
    model.bbox_head.conv_reg.register_forward_hook(lambda m, i, o: seen.append(o.dtype))
    out = model.train_step(batch(), None)
    assert set(seen) == {torch.float16} and out['loss'].dtype == torch.float32
    assert all(np.isfinite(v) for v in out['log_vars'].values())
    with torch.autocast('cpu', dtype=torch.float16):
        head = model.bbox_head
        feats = [torch.randn(1, 16, 4, 4)] * 5
        assert all(r.dtype == torch.float32 for r in head(feats)[1])


def test_aug_test_of_one_augmentation_twice_is_the_single_test():
    """BaseDenseHead's aug_test with centerness factors: the same augmentation twice merges
    to the single-image result (NMS removes the duplicates; exp distances: no empty box,
    which NMS could not match)."""
    import torch

    from tests.helpers.detectors import img_meta
    model = build(_cfg())
    model.eval()
    img = batch()['img'][:1]
    with torch.no_grad():
        single = model.simple_test(img, [img_meta()], rescale=True)[0]
        twice = model.aug_test([img, img], [[img_meta()], [img_meta()]], rescale=True)[0]
    for a, b in zip(single, twice):
        np.testing.assert_array_equal(a, b)
