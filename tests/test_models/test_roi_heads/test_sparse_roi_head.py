"""SparseRoIHead: PseudoSampler only, the stage loss keys and weights, the checkpoint units
(``bbox.{i}``, ``mask.{i}``), the test's top-k over (proposal, class) pairs, bad input."""
import copy

import numpy as np
import pytest
import torch

from ckptzoo.registry import build_detector, build_head

from tests.helpers.checkpointing import one_thread as _one_thread
from tests.helpers.detectors import img_meta
from tests.helpers.sparse_rcnn import sparse_batch, sparse_cfg

one_thread = pytest.fixture(autouse=True)(_one_thread)


def _roi_head(with_mask=False, **kw):
    cfg = sparse_cfg(with_mask=with_mask)
    head = dict(cfg['roi_head'], train_cfg=cfg['train_cfg']['rcnn'],
                test_cfg=cfg['test_cfg']['rcnn'], **kw)
    torch.manual_seed(0)
    return build_head(head)


def _inputs(num_imgs=2, num_proposals=8, feat=16):
    g = torch.Generator().manual_seed(0)
    x = [torch.randn(num_imgs, feat, 64 // s, 64 // s, generator=g) for s in (4, 8, 16, 32)]
    boxes = torch.tensor([0., 0., 64., 64.]).repeat(num_imgs, num_proposals, 1)
    boxes[:, 1:, :2] += torch.rand(num_imgs, num_proposals - 1, 2, generator=g) * 20
    feats = torch.randn(num_imgs, num_proposals, feat, generator=g)
    metas = [img_meta(), img_meta(56, 60)][:num_imgs]
    whwh = torch.tensor([[[64., 64., 64., 64.]], [[60., 56., 60., 56.]]])[:num_imgs]
    return x, boxes, feats, metas, whwh


def test_only_pseudo_sampler():
    cfg = sparse_cfg()
    rcnn = copy.deepcopy(cfg['train_cfg']['rcnn'])
    rcnn[1]['sampler'] = dict(type='RandomSampler', num=4, pos_fraction=0.5)
    with pytest.raises(ValueError, match='PseudoSampler'):
        build_head(dict(cfg['roi_head'], train_cfg=rcnn))
    with pytest.raises(ValueError, match='stage_loss_weights'):
        build_head(dict(cfg['roi_head'], stage_loss_weights=[1, 1, 1]))


@pytest.mark.parametrize('with_mask', [False, True])
def test_units_losses_and_stage_weights(with_mask):
    head = _roi_head(with_mask)
    assert list(head.checkpoint_units()) == (
        ['bbox.0', 'mask.0', 'bbox.1', 'mask.1'] if with_mask else ['bbox.0', 'bbox.1'])
    x, boxes, feats, metas, whwh = _inputs()
    batch = sparse_batch(None)
    if with_mask:
        from ckptzoo.core.mask import BitmapMasks
        batch = sparse_batch(BitmapMasks)
    kw = dict(gt_masks=batch.get('gt_masks'))
    losses = head.forward_train(x, boxes, feats, metas, batch['gt_bboxes'],
                                batch['gt_labels'], imgs_whwh=whwh, **kw)
    names = ['loss_cls', 'pos_acc', 'loss_bbox', 'loss_iou'] + (['loss_mask'] if with_mask
                                                                else [])
    assert list(losses) == [f'stage{i}_{n}' for i in range(2) for n in names]
    assert all(torch.isfinite(v).all() for v in losses.values())
    head.stage_loss_weights = [1, 0.5]
    weighted = head.forward_train(x, boxes, feats, metas, batch['gt_bboxes'],
                                  batch['gt_labels'], imgs_whwh=whwh, **kw)
    for n in names:
        w = 1 if 'acc' in n else 0.5  # the accuracy is no loss: not weighted
        torch.testing.assert_close(weighted[f'stage1_{n}'], w * losses[f'stage1_{n}'])


def test_simple_test_topk_over_proposals_and_classes():
    head = _roi_head()
    head.eval()
    x, boxes, feats, metas, whwh = _inputs()
    with torch.no_grad():
        results = head.simple_test(x, boxes, feats, metas, whwh)
        # the last stage's scores, by hand
        proposal_list = [boxes[i] for i in range(2)]
        obj = feats
        from ckptzoo.core.bbox import bbox2roi
        for stage in range(2):
            out = head._bbox_forward(stage, x, bbox2roi(proposal_list), obj, metas)
            obj, proposal_list = out['object_feats'], out['detach_proposal_list']
        scores = out['cls_score'].sigmoid()
    assert len(results) == 2 and all(len(r) == 3 for r in results)
    for i, res in enumerate(results):
        assert sum(len(r) for r in res) == 8  # max_per_img (proposal, class) pairs
        top = scores[i].flatten().topk(8).values
        got = np.sort(np.concatenate([r[:, 4] for r in res]))[::-1]
        np.testing.assert_allclose(got, top.numpy(), rtol=1e-6)
        for c, r in enumerate(res):
            for row in r:
                j = int(np.argmin(np.abs(scores[i][:, c].numpy() - row[4])))
                np.testing.assert_allclose(row[:4], proposal_list[i][j].numpy(), rtol=1e-6)


def test_bad_input():
    head = _roi_head()
    x, boxes, feats, metas, whwh = _inputs()
    with pytest.raises(ValueError, match='imgs_whwh'):
        head.forward_train(x, boxes, feats, metas, [None] * 2, [None] * 2)
    with pytest.raises(ValueError, match='proposal_boxes'):
        head.simple_test(x, boxes[:1], feats, metas, whwh)
    with pytest.raises(NotImplementedError, match='aug_test'):
        head.aug_test(x, [boxes], [metas])
    mask_head = _roi_head(with_mask=True)
    with pytest.raises(ValueError, match='gt_masks'):
        mask_head.forward_train(x, boxes, feats, metas, [None] * 2, [None] * 2,
                                imgs_whwh=whwh)
    head.test_cfg = dict()
    with pytest.raises(ValueError, match='max_per_img'):
        head.simple_test(x, boxes, feats, metas, whwh)


def test_detector_builds_the_head_with_the_rcnn_cfgs():
    torch.manual_seed(0)
    model = build_detector(sparse_cfg())
    assert len(model.roi_head.bbox_assigner) == 2 and model.roi_head.test_cfg['max_per_img'] == 8


def test_init_weights_leaves_the_mask_heads_as_mmdet():
    """mmdet's cascade keeps the mask heads in a plain nn.ModuleList that its init_weights does
    not enter: QueryInst's DynamicMaskHeads keep their construction-time init; the DII heads
    get theirs (Xavier, fc_cls bias from prior 0.01)."""
    head = _roi_head(with_mask=True)
    before = {k: v.clone() for k, v in head.mask_head.state_dict().items()}
    head.init_weights()
    assert all(torch.equal(v, before[k]) for k, v in head.mask_head.state_dict().items())
    assert (head.mask_head[0].conv_logits.bias != 0).all()
    prior = -float(np.log((1 - 0.01) / 0.01))
    for bbox_head in head.bbox_head:
        torch.testing.assert_close(bbox_head.fc_cls.bias, torch.full_like(bbox_head.fc_cls.bias,
                                                                          prior))
