"""CenterNet end to end on a tiny ResNet-18 / CTResNetNeck from an mmdet-schema config (mmdet
2.28.2's ``centernet/`` settings): losses, backward, ``simple_test`` format, the flip test,
every checkpoint mode of the head exact."""
import numpy as np
import pytest
import torch

from ckptzoo.models.detectors.centernet import flip_tensor
from ckptzoo.registry import build_detector
from tests.helpers.checkpointing import one_thread as _one_thread
from tests.helpers.detectors import det_batch

one_thread = pytest.fixture(autouse=True)(_one_thread)


def centernet_cfg(with_cp=False, **test):
    return dict(
        type='CenterNet',
        backbone=dict(type='ResNet', depth=18, base_channels=8, norm_eval=False,
                      norm_cfg=dict(type='BN')),
        neck=dict(type='CTResNetNeck', in_channel=64, num_deconv_filters=(32, 16, 8),
                  num_deconv_kernels=(4, 4, 4), use_dcn=False),
        bbox_head=dict(type='CenterNetHead', num_classes=3, in_channel=8, feat_channel=8,
                       loss_center_heatmap=dict(type='GaussianFocalLoss', loss_weight=1.0),
                       loss_wh=dict(type='L1Loss', loss_weight=0.1),
                       loss_offset=dict(type='L1Loss', loss_weight=1.0), with_cp=with_cp),
        train_cfg=None, test_cfg=dict(topk=10, local_maximum_kernel=3, max_per_img=10, **test))


def _batch():
    batch = det_batch()
    for m in batch['img_metas']:
        m['border'] = np.zeros(4, dtype=np.float32)
    return batch


def _step(model, batch):
    model.zero_grad(set_to_none=True)
    out = model.train_step(batch, None)
    out['loss'].backward()
    return out, {n: p.grad for n, p in model.named_parameters()}


def test_train_step_and_simple_test():
    torch.manual_seed(0)
    model = build_detector(centernet_cfg())
    assert {'bbox_head.heatmap_head.0.weight', 'neck.deconv_layers.1.conv.weight'} <= \
        set(model.state_dict())
    out, grads = _step(model, _batch())
    assert set(out['log_vars']) == {'loss_center_heatmap', 'loss_wh', 'loss_offset', 'loss'}
    assert all(np.isfinite(v) for v in out['log_vars'].values())
    assert grads['bbox_head.wh_head.2.weight'].abs().sum() > 0
    model.eval()
    batch = _batch()
    with torch.no_grad():
        results = model.simple_test(batch['img'], batch['img_metas'], rescale=True)
    assert len(results) == 2 and all(len(r) == 3 for r in results)
    assert all(d.dtype == np.float32 and d.shape[1] == 5 for r in results for d in r)
    assert sum(len(d) for d in results[0]) == 10


def test_flip_test_averages_the_pair():
    torch.manual_seed(0)
    model = build_detector(centernet_cfg()).eval()
    batch = _batch()
    img = batch['img'][:1]
    meta = dict(batch['img_metas'][0], batch_input_shape=(64, 64))
    flipped = dict(meta, flip=True, flip_direction='horizontal')
    with torch.no_grad():
        result = model.aug_test([img, flip_tensor(img, 'horizontal')], [[meta], [flipped]],
                                rescale=True)
        # a symmetric pair: the same as the plain test on the image
        x = model.extract_feat(torch.cat([img, flip_tensor(img, 'horizontal')]))
        heat, wh, off = model.bbox_head(x)
    assert len(result) == 1 and len(result[0]) == 3
    assert sum(len(d) for d in result[0]) == 10
    with pytest.raises(ValueError, match='pairs'):
        model.aug_test([img], [[meta]])
    with pytest.raises(ValueError, match='flip_direction'):
        flip_tensor(img, 'sideways')
    assert heat[0].shape[0] == 2


def test_with_cp_is_exact():
    batch = _batch()
    grads = []
    for with_cp in (False, True):
        torch.manual_seed(0)
        model = build_detector(centernet_cfg(with_cp))
        if with_cp:
            assert model.checkpoint_plan()['bbox_head.level0'] == 'full'
        grads.append(_step(model, batch)[1])
    for k in grads[0]:
        torch.testing.assert_close(grads[1][k], grads[0][k], rtol=0, atol=0)
