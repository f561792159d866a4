"""CornerNet / CentripetalNet end to end on a tiny HourglassNet from an mmdet-schema config
(mmdet 2.28.2's ``cornernet/`` / ``centripetalnet/`` settings): losses, backward,
``simple_test`` format, the flip test, with_cp exact."""
import numpy as np
import pytest
import torch

from ckptzoo.registry import build_detector
from tests.helpers.checkpointing import one_thread as _one_thread
from tests.helpers.detectors import det_batch

one_thread = pytest.fixture(autouse=True)(_one_thread)


def cornernet_cfg(kind='CornerHead', with_cp=False):
    head = dict(type=kind, num_classes=3, in_channels=8, num_feat_levels=2,
                corner_emb_channels=1, with_cp=with_cp,
                loss_heatmap=dict(type='GaussianFocalLoss', alpha=2.0, gamma=4.0,
                                  loss_weight=1),
                loss_embedding=dict(type='AssociativeEmbeddingLoss', pull_weight=0.10,
                                    push_weight=0.10),
                loss_offset=dict(type='SmoothL1Loss', beta=1.0, loss_weight=1))
    if kind == 'CentripetalHead':
        head.update(corner_emb_channels=0, loss_embedding=None,
                    loss_guiding_shift=dict(type='SmoothL1Loss', beta=1.0, loss_weight=0.05),
                    loss_centripetal_shift=dict(type='SmoothL1Loss', beta=1.0, loss_weight=1))
    return dict(
        type='CornerNet',
        backbone=dict(type='HourglassNet', downsample_times=2, num_stacks=2,
                      stage_channels=[8, 8, 16], stage_blocks=[1, 1, 2], feat_channel=8,
                      norm_cfg=dict(type='BN', requires_grad=True)),
        neck=None, bbox_head=head, train_cfg=None,
        test_cfg=dict(corner_topk=20, local_maximum_kernel=3, distance_threshold=0.5,
                      score_thr=0.05, max_per_img=10,
                      nms=dict(type='soft_nms', iou_threshold=0.5, method='gaussian')))


def _step(model, batch):
    model.zero_grad(set_to_none=True)
    out = model.train_step(batch, None)
    out['loss'].backward()
    return out, {n: p.grad for n, p in model.named_parameters()}


@pytest.mark.parametrize('kind', ['CornerHead', 'CentripetalHead'])
def test_train_step_and_simple_test(kind):
    torch.manual_seed(0)
    model = build_detector(cornernet_cfg(kind))
    out, grads = _step(model, det_batch())
    keys = {'det_loss', 'off_loss', 'pull_loss', 'push_loss'} if kind == 'CornerHead' else \
        {'det_loss', 'off_loss', 'guiding_loss', 'centripetal_loss'}
    assert set(out['log_vars']) == keys | {'loss'}
    assert all(np.isfinite(v) for v in out['log_vars'].values())
    assert grads['backbone.stem.0.conv.weight'].abs().sum() > 0
    model.eval()
    batch = det_batch()
    with torch.no_grad():
        results = model.simple_test(batch['img'], batch['img_metas'], rescale=True)
    assert len(results) == 2 and all(len(r) == 3 for r in results)
    assert all(d.dtype == np.float32 and d.shape[1] == 5 for r in results for d in r)


def test_flip_test():
    torch.manual_seed(0)
    model = build_detector(cornernet_cfg()).eval()
    batch = det_batch()
    img = batch['img'][:1]
    meta = dict(batch['img_metas'][0], batch_input_shape=(64, 64), flip=False)
    flipped = dict(meta, flip=True, flip_direction='horizontal')
    with torch.no_grad():
        result = model.aug_test([img, img.flip(3)], [[meta], [flipped]], rescale=True)
    assert len(result) == 1 and len(result[0]) == 3
    assert sum(len(d) for d in result[0]) <= 10
    with pytest.raises(ValueError, match='pairs'):
        model.aug_test([img, img], [[meta], [meta]])


def test_with_cp_is_exact():
    batch = det_batch()
    grads = []
    for with_cp in (False, True):
        torch.manual_seed(0)
        cfg = cornernet_cfg(with_cp=with_cp)
        cfg['backbone']['with_cp'] = with_cp
        model = build_detector(cfg)
        if with_cp:
            assert set(model.checkpoint_plan().values()) == {'full'}
        grads.append(_step(model, batch)[1])
    for k in grads[0]:
        torch.testing.assert_close(grads[1][k], grads[0][k], rtol=0, atol=0)
