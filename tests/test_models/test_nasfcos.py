"""NAS-FCOS end to end on a tiny model (NASFCOS_FPN neck with DCNv2 convs, NASFCOSHead or
FCOSHead): losses and every gradient, every checkpoint mode on the head's levels, results."""
import numpy as np
import pytest

from ckptzoo.models import NASFCOS
from tests.helpers.anchor_free import (assert_every_mode_exact, assert_result_format, batch,
                                       build, detector_cfg, step)
from tests.helpers.checkpointing import one_thread

one_thread = pytest.fixture(autouse=True)(one_thread)


def _cfg(head_type='NASFCOSHead'):
    head = dict(type=head_type, num_classes=3, in_channels=16, feat_channels=16,
                stacked_convs=2, strides=[8, 16, 32, 64, 128],
                norm_cfg=dict(type='GN', num_groups=4),
                regress_ranges=((-1, 32), (0, 64), (0, 64), (0, 1e8), (0, 1e8)))
    neck = dict(type='NASFCOS_FPN', in_channels=[8, 16, 32, 64], out_channels=16,
                start_level=1, add_extra_convs=True, num_outs=5, norm_cfg=dict(type='BN'),
                conv_cfg=dict(type='DCNv2', deform_groups=2))
    return detector_cfg('NASFCOS', head, neck=neck)


@pytest.mark.parametrize('head_type', ['NASFCOSHead', 'FCOSHead'])
def test_train_step_and_results(head_type):
    model = build(_cfg(head_type))
    assert isinstance(model, NASFCOS)
    log, grads, _ = step(model, batch())
    assert list(log) == ['loss_cls', 'loss_bbox', 'loss_centerness', 'loss']
    assert all(np.isfinite(v) for v in log.values()) and log['loss_bbox'] > 0
    head = {n for n, _ in model.named_parameters() if n.startswith('bbox_head.')}
    assert head <= set(grads)
    assert_result_format(model)


@pytest.mark.filterwarnings('ignore:checkpoint mode .offload.')
@pytest.mark.parametrize('mode', [None, 'full', 'selective', 'offload'])
def test_every_mode_on_the_head_levels_equals_plain(monkeypatch, mode):
    assert_every_mode_exact(monkeypatch, _cfg(), mode)
