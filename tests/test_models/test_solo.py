"""SOLO end to end on tiny models (SOLOHead, DecoupledSOLOHead, DecoupledSOLOLightHead): built
from an mmdet-schema config dict, mmdet's loss and state-dict keys, a train step with and
without instances, every checkpoint mode on the head's levels, the result format."""
import numpy as np
import pytest

from ckptzoo.models import SOLO
from tests.helpers.checkpointing import one_thread
from tests.helpers.solo import (assert_every_mode_exact, assert_result_format, batch, build,
                                detector_cfg, head_cfg, head_units, run_test, step,
                                trained_looking)

one_thread = pytest.fixture(autouse=True)(one_thread)

HEADS = ['SOLOHead', 'DecoupledSOLOHead', 'DecoupledSOLOLightHead']


def _cfg(head_type, **kw):
    return detector_cfg('SOLO', head_cfg(head_type, **kw))


@pytest.mark.parametrize('head_type', HEADS)
def test_train_step_with_and_without_instances(head_type):
    model = build(_cfg(head_type))
    assert isinstance(model, SOLO) and model.bbox_head is None
    log, grads, _ = step(model, batch())
    assert list(log) == ['loss_mask', 'loss_cls', 'loss']
    assert all(np.isfinite(v) for v in log.values()) and log['loss_mask'] > 0
    assert set(grads) == {n for n, p in model.named_parameters() if p.requires_grad}
    log, _, _ = step(model, batch(empty_second=True))
    assert all(np.isfinite(v) for v in log.values())


def test_state_dict_keys_are_mmdets():
    keys = set(build(_cfg('SOLOHead')).state_dict())
    assert {'mask_head.mask_convs.0.conv.weight', 'mask_head.mask_convs.0.gn.bias',
            'mask_head.cls_convs.1.conv.weight', 'mask_head.conv_mask_list.4.weight',
            'mask_head.conv_cls.bias'} <= keys
    keys = set(build(_cfg('DecoupledSOLOHead')).state_dict())
    assert {'mask_head.mask_convs_x.0.conv.weight', 'mask_head.mask_convs_y.1.gn.weight',
            'mask_head.conv_mask_list_x.0.weight', 'mask_head.conv_mask_list_y.4.bias'} <= keys
    keys = set(build(_cfg('DecoupledSOLOLightHead')).state_dict())
    assert 'mask_head.mask_convs.0.conv.weight' in keys and \
        not any('mask_convs_x' in k for k in keys)


@pytest.mark.filterwarnings('ignore:checkpoint mode .offload.')
@pytest.mark.parametrize('head_type', HEADS)
@pytest.mark.parametrize('mode', [None, 'full', 'selective', 'offload'])
def test_every_mode_on_the_head_levels_equals_plain(monkeypatch, head_type, mode):
    assert_every_mode_exact(monkeypatch, _cfg(head_type), mode)


def test_with_cp_checkpoints_every_level():
    model = build(detector_cfg('SOLO', head_cfg('SOLOHead'), with_cp=True))
    plan = model.checkpoint_plan()
    assert head_units(model) == [f'mask_head.level{i}' for i in range(5)]
    assert [plan[u] for u in head_units(model)] == ['full'] * 5


@pytest.mark.parametrize('head_type', HEADS)
def test_results_format(head_type):
    model = trained_looking(build(_cfg(head_type)))
    results, metas = run_test(model)
    assert assert_result_format(results, metas) > 0
    results, metas = run_test(model, rescale=False)
    assert assert_result_format(results, metas, rescale=False) > 0
