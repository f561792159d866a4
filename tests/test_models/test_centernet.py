"""CenterNet end to end on a tiny model (ResNet-18, CTResNetNeck with and without DCNv2,
CenterNetHead): mmdet's loss keys, every gradient, every checkpoint mode on the head's level,
results, the flip-pair test-time augmentation."""
import numpy as np
import pytest
import torch

from ckptzoo.models import CenterNet
from tests.helpers.anchor_free import assert_every_mode_exact, batch, build, step
from tests.helpers.checkpointing import one_thread
from tests.helpers.detectors import img_meta

one_thread = pytest.fixture(autouse=True)(one_thread)


def _cfg(use_dcn=False):
    return dict(
        type='CenterNet',
        backbone=dict(type='ResNet', depth=18, base_channels=8, norm_eval=False,
                      norm_cfg=dict(type='BN')),
        neck=dict(type='CTResNetNeck', in_channel=64, num_deconv_filters=(32, 16, 16),
                  num_deconv_kernels=(4, 4, 4), use_dcn=use_dcn),
        bbox_head=dict(type='CenterNetHead', num_classes=3, in_channel=16, feat_channel=16,
                       loss_center_heatmap=dict(type='GaussianFocalLoss', loss_weight=1.0),
                       loss_wh=dict(type='L1Loss', loss_weight=0.1),
                       loss_offset=dict(type='L1Loss', loss_weight=1.0)),
        train_cfg=None, test_cfg=dict(topk=100, local_maximum_kernel=3, max_per_img=100))


def _batch(empty_second=False):
    data = batch(empty_second)
    for meta in data['img_metas']:
        meta['batch_input_shape'] = (64, 64)
    return data


@pytest.mark.parametrize('use_dcn', [False, True], ids=['plain', 'dcn'])
def test_train_step_and_results(use_dcn):
    model = build(_cfg(use_dcn))
    assert isinstance(model, CenterNet)
    log, grads, _ = step(model, _batch())
    assert list(log) == ['loss_center_heatmap', 'loss_wh', 'loss_offset', 'loss']
    assert all(np.isfinite(v) and v > 0 for v in log.values())
    assert set(grads) == {n for n, p in model.named_parameters() if p.requires_grad}
    log, _, _ = step(model, _batch(empty_second=True))
    assert all(np.isfinite(v) for v in log.values())
    model.eval()
    data = _batch()
    with torch.no_grad():
        results = model.simple_test(data['img'], data['img_metas'], rescale=True)
    assert len(results) == 2 and all(len(r) == 3 for r in results)
    assert all(sum(len(c) for c in r) == 100 for r in results)  # topk, no NMS
    assert all(c.dtype == np.float32 and c.shape[1] == 5 for r in results for c in r)


@pytest.mark.filterwarnings('ignore:checkpoint mode .offload.')
@pytest.mark.parametrize('mode', [None, 'full', 'selective', 'offload'])
def test_every_mode_on_the_head_level_equals_plain(monkeypatch, mode):
    units = ['bbox_head.level0']
    assert_every_mode_exact(monkeypatch, _cfg(use_dcn=True), mode, data=_batch(), units=units)


def test_aug_test_averages_the_flipped_pair():
    """An image and its flip: the flipped heatmap and sizes flipped back and averaged with the
    image's (offsets the image's), decoded as one image."""
    from ckptzoo.models.detectors.single_stage import bbox2result
    model = build(_cfg())
    model.eval()
    img = torch.randn(1, 3, 64, 64)
    meta = dict(img_meta(), batch_input_shape=(64, 64))
    flipped = dict(meta, flip=True, flip_direction='horizontal')
    with torch.no_grad():
        pair = model.aug_test([img, img.flip(-1)], [[dict(meta)], [dict(flipped)]])
        heat, wh, offset = model.bbox_head(model.extract_feat(torch.cat([img, img.flip(-1)])))
        (dets, labels), = model.bbox_head.get_bboxes(
            [(heat[0][:1] + heat[0][1:].flip(-1)) / 2], [(wh[0][:1] + wh[0][1:].flip(-1)) / 2],
            [offset[0][:1]], [dict(meta)], rescale=True)
    assert len(pair) == 1 and sum(len(c) for c in pair[0]) == 100
    for a, b in zip(pair[0], bbox2result(dets, labels, 3)):
        np.testing.assert_array_equal(a, b)
    with pytest.raises(ValueError, match='pairs'):
        model.aug_test([img, img], [[dict(meta)], [dict(meta)]])
