"""DecoupledSOLOHead and DecoupledSOLOLightHead (mmdet 2.28.2's) alone: layers and keys, the
x / y branches' indexing in the loss, results, DCN on the light head's last convs."""
import pytest
import torch

from ckptzoo.models.dense_heads import DecoupledSOLOHead, DecoupledSOLOLightHead
from ckptzoo.ops import ModulatedDeformConv2dPack
from ckptzoo.registry import MODELS
from tests.helpers.checkpointing import one_thread
from tests.helpers.solo import TEST_CFG, head_cfg, meta

one_thread = pytest.fixture(autouse=True)(one_thread)


def _head(head_type='DecoupledSOLOHead', **kw):
    torch.manual_seed(0)
    return MODELS.build(dict(head_cfg(head_type, **kw), test_cfg=dict(TEST_CFG)))


def _feats():
    g = torch.Generator().manual_seed(0)
    return [torch.randn(2, 16, 128 // s, 128 // s, generator=g) for s in (4, 8, 16, 32, 64)]


def test_layers():
    head = _head()
    assert isinstance(head, DecoupledSOLOHead)
    assert head.mask_convs_x[0].conv.in_channels == 17  # one coordinate each
    assert [c.out_channels for c in head.conv_mask_list_x] == [12, 10, 8, 6, 4]
    assert head.conv_mask_list_y[0].kernel_size == (3, 3)
    light = _head('DecoupledSOLOLightHead', dcn_cfg=dict(type='DCNv2'))
    assert isinstance(light, DecoupledSOLOLightHead) and light.mask_convs[0].conv.in_channels == 18
    dcn = sorted(n for n, m in light.named_modules() if isinstance(m, ModulatedDeformConv2dPack))
    assert dcn == ['cls_convs.1.conv', 'mask_convs.1.conv']
    with pytest.raises(TypeError, match='dcn_cfg'):
        _head('DecoupledSOLOLightHead', dcn_cfg='DCNv2')


@pytest.mark.parametrize('head_type', ['DecoupledSOLOHead', 'DecoupledSOLOLightHead'])
def test_loss_is_the_dice_of_the_row_times_column(head_type):
    """One instance with one positive cell: the mask loss is the dice loss of
    sigmoid(y[row]) * sigmoid(x[col]) against the target."""
    head = _head(head_type)
    feats = _feats()
    mask = torch.zeros(1, 128, 128, dtype=torch.bool)
    mask[0, 40:80, 12:52] = True
    box = torch.tensor([[12., 40., 52., 80.]])
    # only level 1 (12..48): scale ranges of the others exclude sqrt(area) 40
    head.scale_ranges = ((1, 2), (12, 48), (1000, 1001), (1000, 1001), (1000, 1001))
    px, py, cls = head(feats)
    losses = head.loss(px, py, cls, gt_labels=[torch.tensor([2]), torch.tensor([2])],
                       gt_masks=[mask, mask], img_metas=[meta(), meta()], gt_bboxes=[box, box])
    targets, _, _ = head._get_targets_single(box, torch.tensor([2]), mask,
                                             [p.shape[-2:] for p in px])
    pred = torch.stack([py[1][i, 4].sigmoid() * px[1][i, 2].sigmoid() for i in range(2)])
    expected = head.loss_mask(pred, torch.cat([targets[1]] * 2), reduction_override='none')
    torch.testing.assert_close(losses['loss_mask'], expected.sum() / 2)
    sum(losses.values()).backward()


@pytest.mark.parametrize('head_type', ['DecoupledSOLOHead', 'DecoupledSOLOLightHead'])
def test_results(head_type):
    head = _head(head_type)
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        head.conv_cls.bias.copy_(torch.randn(3, generator=g))
        for conv in list(head.conv_mask_list_x) + list(head.conv_mask_list_y):
            conv.bias.copy_(torch.randn(conv.bias.shape, generator=g) + 1)
    head.eval()
    with torch.no_grad():
        results = head.simple_test(_feats(), [meta(), meta(120, 112, ori=(90, 100, 3))],
                                   rescale=True)
    assert [tuple(r['masks'].shape[1:]) for r in results] == [(128, 128), (90, 100)]
    assert sum(len(r['scores']) for r in results) > 0
