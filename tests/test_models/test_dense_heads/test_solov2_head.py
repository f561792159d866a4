"""SOLOV2Head and MaskFeatModule (mmdet 2.28.2's) alone: layers and keys, the mask feature
branch, targets with a cell two instances hit (kept twice, as mmdet), the dynamic-conv loss
by hand, results, refusals."""
import pytest
import torch
import torch.nn.functional as F

from ckptzoo.models.dense_heads import MaskFeatModule, SOLOV2Head
from ckptzoo.registry import MODELS
from tests.helpers.checkpointing import one_thread
from tests.helpers.solo import MASK_FEATURE_HEAD, TEST_CFG, head_cfg, meta

one_thread = pytest.fixture(autouse=True)(one_thread)


def _head(**kw):
    torch.manual_seed(0)
    return MODELS.build(dict(head_cfg('SOLOV2Head', **kw), test_cfg=dict(TEST_CFG)))


def _feats():
    g = torch.Generator().manual_seed(0)
    return [torch.randn(2, 16, 128 // s, 128 // s, generator=g) for s in (4, 8, 16, 32, 64)]


def test_mask_feature_module():
    m = MaskFeatModule(16, 8, 0, 3, 12, norm_cfg=dict(type='GN', num_groups=4))
    assert [len([c for c in lvl if type(c).__name__ == 'ConvModule'])
            for lvl in m.convs_all_levels] == [1, 1, 2, 3]
    assert m.convs_all_levels[3].conv0.conv.in_channels == 18  # coordinates on the last
    out = m(_feats())
    assert out.shape == (2, 12, 32, 32)
    with pytest.raises(ValueError, match='start_level'):
        MaskFeatModule(16, 8, 2, 1, 12)


def test_mask_feature_module_conv_pred_init_is_kaiming():
    """mmcv's init_weights runs init_cfg (Normal std 0.01 on every Conv2d) and then the
    direct child ConvModule ``conv_pred``'s own init_weights (kaiming, fan_out, relu); the
    convs inside the plain ``convs_all_levels`` containers keep std 0.01."""
    torch.manual_seed(0)
    m = MaskFeatModule(64, 64, 0, 1, 256, norm_cfg=dict(type='GN', num_groups=32))
    w = m.conv_pred.conv.weight
    assert abs(w.std().item() - (2 / 256) ** 0.5) < 0.01  # kaiming fan_out: sqrt(2 / 256)
    assert abs(m.convs_all_levels[0].conv0.conv.weight.std().item() - 0.01) < 0.001
    assert torch.equal(m.conv_pred.gn.weight, torch.ones(256))


def test_layers_and_forward():
    head = _head()
    assert isinstance(head, SOLOV2Head) and head.kernel_out_channels == 16
    assert head.kernel_convs[0].conv.in_channels == 18 and head.mask_stride == 4
    kernels, cls, mask_feats = head(_feats())
    assert [tuple(k.shape) for k in kernels] == [(2, 16, g, g) for g in (12, 10, 8, 6, 4)]
    assert [tuple(c.shape) for c in cls] == [(2, 3, g, g) for g in (12, 10, 8, 6, 4)]
    assert mask_feats.shape == (2, 16, 32, 32)


def test_mask_feature_in_channels_follow_the_head():
    with pytest.warns(UserWarning, match='in_channels'):
        head = _head(mask_feature_head=dict(MASK_FEATURE_HEAD, in_channels=8))
    assert head.mask_feature_head.in_channels == 16


def test_a_cell_hit_twice_is_kept_twice():
    head = _head()
    masks = torch.zeros(2, 128, 128, dtype=torch.bool)
    masks[0, 40:80, 12:52] = True
    masks[1, 44:76, 16:48] = True  # the same centre cell on level 1
    boxes = torch.tensor([[12., 40., 52., 80.], [16., 44., 48., 76.]])
    targets, labels, pos, index = head._get_targets_single(boxes, torch.tensor([2, 0]), masks,
                                                           torch.Size((32, 32)))
    assert index[1] == [42, 42] and int(pos[1].sum()) == 1 and labels[1][4, 2] == 0
    assert targets[1].shape == (2, 32, 32) and not torch.equal(targets[1][0], targets[1][1])


def test_loss_by_hand():
    head = _head()
    head.scale_ranges = ((1, 2), (12, 48), (1000, 1001), (1000, 1001), (1000, 1001))
    mask = torch.zeros(1, 128, 128, dtype=torch.bool)
    mask[0, 40:80, 12:52] = True
    box = torch.tensor([[12., 40., 52., 80.]])
    empty = dict(gt_labels=torch.zeros(0, dtype=torch.long), gt_masks=mask[:0],
                 gt_bboxes=torch.zeros(0, 4))
    kernels, cls, mask_feats = head(_feats())
    losses = head.loss(kernels, cls, mask_feats, gt_labels=[torch.tensor([2]),
                                                            empty['gt_labels']],
                       gt_masks=[mask, empty['gt_masks']], img_metas=[meta(), meta()],
                       gt_bboxes=[box, empty['gt_bboxes']])
    targets, _, _, _ = head._get_targets_single(box, torch.tensor([2]), mask,
                                                mask_feats.shape[-2:])
    kernel = kernels[1][0, :, 4, 2]
    pred = (mask_feats[0] * kernel[:, None, None]).sum(0, keepdim=True)
    expected = head.loss_mask(pred, targets[1], reduction_override='none')
    torch.testing.assert_close(losses['loss_mask'], expected.sum(), rtol=1e-5, atol=1e-6)
    sum(losses.values()).backward()
    # no instance at all: a zero mask loss that keeps the graph
    losses = head.loss(*head(_feats()), gt_labels=[empty['gt_labels']] * 2,
                       gt_masks=[empty['gt_masks']] * 2, img_metas=[meta(), meta()],
                       gt_bboxes=[empty['gt_bboxes']] * 2)
    assert losses['loss_mask'] == 0 and losses['loss_mask'].requires_grad


def test_results_chunked_dynamic_conv(monkeypatch):
    import ckptzoo.models.dense_heads.solo_head as solo_head
    head = _head()
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        head.conv_cls.bias.copy_(torch.randn(3, generator=g))
        head.conv_kernel.bias.copy_(torch.randn(16, generator=g))
    head.eval()
    metas = [meta(), meta(120, 112, ori=(90, 100, 3))]
    with torch.no_grad():
        results = head.simple_test(_feats(), metas, rescale=True)
        assert [tuple(r['masks'].shape[1:]) for r in results] == [(128, 128), (90, 100)]
        assert sum(len(r['scores']) for r in results) > 0
        monkeypatch.setattr(solo_head, 'MASK_MEM_LIMIT', 1)
        for a, b in zip(results, head.simple_test(_feats(), metas, rescale=True)):
            torch.testing.assert_close(a['scores'], b['scores'], rtol=1e-5, atol=1e-7)
            assert torch.equal(a['labels'], b['labels'])


@pytest.mark.parametrize('kw, error, words', [
    (dict(dynamic_conv_size=3), ValueError, 'dynamic_conv_size'),
    (dict(dcn_cfg='DCNv2'), TypeError, 'dcn_cfg'),
    (dict(mask_feature_head=dict(feat_channels=8, start_level=0, end_level=3)), ValueError,
     'out_channels')])
def test_refusals(kw, error, words):
    with pytest.raises(error, match=words):
        _head(**kw)


def test_the_dynamic_conv_is_a_1x1_conv():
    """What the loss and the results compute: F.conv2d of the features with the kernels."""
    feats = torch.randn(1, 4, 5, 5)
    kernels = torch.randn(3, 4)
    out = F.conv2d(feats, kernels.view(3, 4, 1, 1))[0]
    torch.testing.assert_close(out, torch.einsum('ck,khw->chw', kernels, feats[0]))


def test_deformable_offsets_keep_the_normal_init():
    """mmdet's SOLO heads are BaseMaskHeads, not BaseDenseHeads: nothing zeroes a deformable
    conv's ``conv_offset`` after the init_cfg (Normal std 0.01 over 'Conv2d' layers reaches
    it), in the tower and in the mask feature branch alike (conv_pred included)."""
    torch.manual_seed(0)
    head = MODELS.build(dict(
        head_cfg('SOLOV2Head', feat_channels=64, dcn_cfg=dict(type='DCNv2'),
                 mask_feature_head=dict(MASK_FEATURE_HEAD, feat_channels=64,
                                        conv_cfg=dict(type='DCNv2'))),
        test_cfg=dict(TEST_CFG)))
    offsets = [m.conv_offset for m in head.modules() if hasattr(m, 'conv_offset')]
    assert len(offsets) == 2 * 2 + 1 + 1 + 2 + 3 + 1  # towers, levels 0..3, conv_pred
    for conv in offsets:
        assert abs(conv.weight.std().item() - 0.01) < 0.002
        assert not torch.any(conv.bias)
