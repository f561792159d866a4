"""SOLOHead (mmdet 2.28.2's) alone: layers and keys, the grid assignment by hand, losses with
and without instances, test-time results (rescale, empty, chunking bound), refusals."""
import numpy as np
import pytest
import torch

import ckptzoo.models.dense_heads.solo_head as solo_head
from ckptzoo.models.dense_heads import BaseMaskHead, SOLOHead
from ckptzoo.registry import MODELS
from tests.helpers.checkpointing import one_thread
from tests.helpers.solo import TEST_CFG, head_cfg, meta

one_thread = pytest.fixture(autouse=True)(one_thread)


def _head(**kw):
    torch.manual_seed(0)
    return MODELS.build(dict(head_cfg('SOLOHead', **kw), test_cfg=dict(TEST_CFG)))


def _feats(batch=2):
    g = torch.Generator().manual_seed(0)
    return [torch.randn(batch, 16, 128 // s, 128 // s, generator=g) for s in (4, 8, 16, 32, 64)]


def test_layers_and_keys():
    head = _head()
    assert isinstance(head, BaseMaskHead) and head.num_levels == 5
    assert head.mask_convs[0].conv.in_channels == 18  # the two coordinates
    assert head.cls_convs[0].conv.in_channels == 16
    assert [c.out_channels for c in head.conv_mask_list] == [144, 100, 64, 36, 16]
    assert head.conv_cls.out_channels == 3
    keys = set(head.state_dict())
    assert {'mask_convs.1.gn.weight', 'conv_mask_list.0.bias', 'conv_cls.weight'} <= keys
    assert 'mask_convs.0.conv.bias' not in keys  # a norm follows: no conv bias (mmcv's auto)


def test_forward_shapes_train_and_test():
    head = _head()
    mask_preds, cls_preds = head(_feats())
    # levels resized: the first to the second's size, the last to the one before's, then x2
    assert [tuple(m.shape[-2:]) for m in mask_preds] == [(32, 32), (32, 32), (16, 16), (8, 8),
                                                         (8, 8)]
    assert [tuple(c.shape) for c in cls_preds] == [(2, 3, g, g) for g in (12, 10, 8, 6, 4)]
    head.eval()
    with torch.no_grad():
        mask_probs, scores = head(_feats())
    assert all((m >= 0).all() and (m <= 1).all() for m in mask_probs)
    for s in scores:  # the local maximum of each 2x2 window survives
        assert ((s == 0) | (s == torch.nn.functional.max_pool2d(
            s, 2, stride=1, padding=1)[:, :, :-1, :-1])).all()


def test_grid_assignment_by_hand():
    """One 40x40 square, centre of mass (59.5, 31.5): sqrt(area) 40 picks levels 1 (12..48)
    and 2 (24..96). Level 1 (10x10 grid, 12.8 px cells): cell (4, 2), the centre region
    (+-4 px) stays in it; level 2 (8x8, 16 px): cell (3, 1), the region reaches column 2."""
    head = _head()
    mask = torch.zeros(1, 128, 128, dtype=torch.bool)
    mask[0, 40:80, 12:52] = True
    boxes = torch.tensor([[12., 40., 52., 80.]])
    sizes = [torch.Size((32, 32))] * 2 + [torch.Size((16, 16))] + [torch.Size((8, 8))] * 2
    targets, labels, pos = head._get_targets_single(boxes, torch.tensor([2]), mask, sizes)
    assert [int(p.sum()) for p in pos] == [0, 1, 2, 0, 0]
    assert labels[1][4, 2] == 2 and (labels[1] != 3).sum() == 1 and pos[1][4 * 10 + 2]
    assert (labels[2] != 3).nonzero().tolist() == [[3, 1], [3, 2]]
    # the targets: the mask at stride 4 (levels 0, 1) / 8 (level 2), cv2-resized
    assert targets[1].shape == (1, 32, 32) and targets[1].dtype == torch.uint8
    assert targets[1][0].sum() == 100 and targets[1][0, 10:20, 3:13].all()
    # columns 12..52 at stride 8 straddle pixels (1.5 .. 6.5): cv2's bilinear keeps 5 x 6
    assert targets[2].shape == (2, 16, 16) and (targets[2].sum((1, 2)) == 30).all()
    assert torch.equal(targets[2][0], targets[2][1])
    assert targets[0].shape == (0, 32, 32)


def test_loss_with_and_without_instances():
    head = _head()
    feats = _feats()
    mask = torch.zeros(1, 128, 128, dtype=torch.bool)
    mask[0, 40:80, 12:52] = True
    gt = dict(gt_labels=[torch.tensor([2]), torch.zeros(0, dtype=torch.long)],
              gt_masks=[mask, mask[:0]], img_metas=[meta(), meta()],
              gt_bboxes=[torch.tensor([[12., 40., 52., 80.]]), torch.zeros(0, 4)])
    losses = head.forward_train(feats, **gt)
    assert list(losses) == ['loss_mask', 'loss_cls'] and losses['loss_mask'] > 0
    sum(losses.values()).backward()
    empty = dict(gt, gt_labels=[gt['gt_labels'][1]] * 2, gt_masks=[mask[:0]] * 2,
                 gt_bboxes=[torch.zeros(0, 4)] * 2)
    losses = head.forward_train(feats, **empty)
    assert losses['loss_mask'] == 0 and torch.isfinite(losses['loss_cls'])
    sum(losses.values()).backward()
    with pytest.raises(ValueError, match='gt_bboxes'):
        head.forward_train(feats, **dict(gt, gt_bboxes=None))


def _results(head, rescale=True):
    head.eval()
    with torch.no_grad():
        return head.simple_test(_feats(), [meta(), meta(120, 112, ori=(90, 100, 3))],
                                rescale=rescale)


def _biased_head():
    head = _head()
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        head.conv_cls.bias.copy_(torch.randn(3, generator=g))
        for conv in head.conv_mask_list:
            conv.bias.copy_(torch.randn(conv.bias.shape, generator=g))
    return head


def test_results_sizes_and_chunking_bound(monkeypatch):
    head = _biased_head()
    results = _results(head)
    assert [tuple(r['masks'].shape[1:]) for r in results] == [(128, 128), (90, 100)]
    assert all(len(r['scores']) == len(r['labels']) == len(r['masks']) > 0 for r in results)
    assert all((r['scores'][:-1] >= r['scores'][1:]).all() for r in results)
    assert [tuple(r['masks'].shape[1:]) for r in _results(head, rescale=False)] == \
        [(128, 128), (120, 112)]
    # one mask per chunk gives the same results (the maskness sums may round differently
    # in the last bit: a reduction's order follows the batch's shape)
    monkeypatch.setattr(solo_head, 'MASK_MEM_LIMIT', 1)
    for a, b in zip(results, _results(head)):
        torch.testing.assert_close(a['scores'], b['scores'], rtol=1e-6, atol=0)
        assert torch.equal(a['labels'], b['labels']) and torch.equal(a['masks'], b['masks'])


def test_results_empty_and_test_cfg():
    head = _biased_head()
    head.test_cfg = dict(TEST_CFG, score_thr=1.0)
    for r, shape in zip(_results(head), [(128, 128), (90, 100)]):
        assert r['masks'].shape == (0, *shape) and r['masks'].dtype == torch.bool
        assert len(r['scores']) == len(r['labels']) == 0
    head.test_cfg = dict(TEST_CFG, max_per_img=2)
    assert all(len(r['scores']) <= 2 for r in _results(head))
    head.test_cfg = {k: v for k, v in TEST_CFG.items() if k != 'mask_thr'}
    with pytest.raises(KeyError, match='mask_thr'):
        _results(head)


@pytest.mark.parametrize('kw, words', [
    (dict(num_grids=[12, 10, 8, 6]), 'one stride, scale range and grid per level'),
    (dict(cls_down_index=2), 'cls_down_index'),
    (dict(stacked_convs=0), 'stacked_convs'),
    (dict(loss_mask=None), 'loss_mask'),
    (dict(num_classes=0), 'num_classes')])
def test_refusals(kw, words):
    with pytest.raises(ValueError, match=words):
        _head(**kw)


def test_wrong_number_of_levels():
    with pytest.raises(ValueError, match='expects 5 levels'):
        _head()(_feats()[:4])


def test_chunks_are_bounded():
    assert solo_head._chunks(10, solo_head.MASK_MEM_LIMIT // 3) == [slice(0, 3), slice(3, 6),
                                                                   slice(6, 9), slice(9, 10)]
    assert solo_head._chunks(2, 10 * solo_head.MASK_MEM_LIMIT) == [slice(0, 1), slice(1, 2)]
    assert solo_head._chunks(0, 1) == []
    assert np.isclose(solo_head.MASK_MEM_LIMIT, 1024**3)


def test_is_solo_head_registered():
    assert MODELS.get('SOLOHead') is SOLOHead
