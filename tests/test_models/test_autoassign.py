"""AutoAssign end to end on a tiny model: mmdet's loss keys, every gradient, every checkpoint
mode on the head's levels, results."""
import numpy as np
import pytest

from ckptzoo.models import AutoAssign
from tests.helpers.anchor_free import (assert_every_mode_exact, assert_result_format, batch,
                                       build, detector_cfg, step)
from tests.helpers.checkpointing import one_thread

one_thread = pytest.fixture(autouse=True)(one_thread)


def _cfg(**head_kw):
    head = dict(type='AutoAssignHead', num_classes=3, in_channels=16, stacked_convs=2,
                feat_channels=16, strides=[8, 16, 32, 64, 128],
                norm_cfg=dict(type='GN', num_groups=4), loss_bbox=dict(type='GIoULoss',
                                                                       loss_weight=5.0))
    head.update(head_kw)
    return detector_cfg('AutoAssign', head)


@pytest.mark.parametrize('head_kw', [{}, dict(force_topk=True, topk=3)],
                         ids=['plain', 'force_topk'])
def test_train_step_and_results(head_kw):
    model = build(_cfg(**head_kw))
    assert isinstance(model, AutoAssign)
    log, grads, _ = step(model, batch())
    assert list(log) == ['loss_pos', 'loss_neg', 'loss_center', 'loss']
    assert all(np.isfinite(v) for v in log.values()) and log['loss_pos'] > 0
    assert {'bbox_head.center_prior.mean', 'bbox_head.center_prior.sigma',
            'bbox_head.conv_cls.weight', 'bbox_head.conv_reg.weight'} <= set(grads)
    log, _, _ = step(model, batch(empty_second=True))
    assert all(np.isfinite(v) for v in log.values())
    assert_result_format(model)


@pytest.mark.filterwarnings('ignore:checkpoint mode .offload.')
@pytest.mark.parametrize('mode', [None, 'full', 'selective', 'offload'])
def test_every_mode_on_the_head_levels_equals_plain(monkeypatch, mode):
    assert_every_mode_exact(monkeypatch, _cfg(), mode)
