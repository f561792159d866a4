"""SingleStageInstanceSegmentor (mmdet 2.28.2's) around a toy mask head: keys, the heads'
interface (train_cfg / test_cfg handed on, gt masks as bool tensors), the result format
``(bbox_results, segm_results)`` per image, refusals."""
import numpy as np
import pytest
import torch
import torch.nn as nn

from ckptzoo.core.mask import BitmapMasks
from ckptzoo.models.detectors import SingleStageInstanceSegmentor
from ckptzoo.registry import MODELS, build_detector

from tests.helpers.detectors import img_meta


@MODELS.register_module(name='_ToyMaskHeadForSSIS', force=True)
class ToyMaskHead(nn.Module):
    """One conv; loss the mean logit on the gt masks; test: one mask per gt-free class."""

    def __init__(self, num_classes=3, in_channels=16, train_cfg=None, test_cfg=None):
        super().__init__()
        self.num_classes = num_classes
        self.conv = nn.Conv2d(in_channels, 1, 1)
        self.train_cfg, self.test_cfg = train_cfg, test_cfg

    def forward_train(self, x, gt_labels, gt_masks, img_metas, positive_infos=None, **kw):
        assert positive_infos is None
        assert all(m.dtype == torch.bool for m in gt_masks)
        self.seen = [m.shape for m in gt_masks]
        return dict(loss_mask=self.conv(x[0]).mean())

    def simple_test(self, x, img_metas, rescale=False, instances_list=None):
        out = []
        for i, meta in enumerate(img_metas):
            h, w = meta['ori_shape'][:2] if rescale else meta['img_shape'][:2]
            if i == 1:
                out.append(dict(scores=x[0].new_zeros(0), labels=x[0].new_zeros(0).long(),
                                masks=x[0].new_zeros(0, h, w, dtype=torch.bool)))
                continue
            masks = torch.zeros(2, h, w, dtype=torch.bool)
            masks[0, :4, :5] = True
            out.append(dict(scores=torch.tensor([0.9, 0.4]), labels=torch.tensor([2, 0]),
                            masks=masks))
        return out


def _cfg():
    return dict(
        type='SingleStageInstanceSegmentor',
        backbone=dict(type='ResNet', depth=18, base_channels=8, out_indices=(0, 1, 2, 3),
                      norm_cfg=dict(type='BN', requires_grad=True), style='pytorch'),
        neck=dict(type='FPN', in_channels=[8, 16, 32, 64], out_channels=16, start_level=0,
                  num_outs=5),
        mask_head=dict(type='_ToyMaskHeadForSSIS', num_classes=3, in_channels=16),
        train_cfg=dict(a=1), test_cfg=dict(b=2))


def test_keys_and_cfgs_handed_on():
    model = build_detector(_cfg())
    assert isinstance(model, SingleStageInstanceSegmentor)
    assert model.bbox_head is None and model.with_mask
    assert {k.split('.')[0] for k in model.state_dict()} == {'backbone', 'neck', 'mask_head'}
    assert model.mask_head.train_cfg == dict(a=1) and model.mask_head.test_cfg == dict(b=2)


def test_train_step_masks_as_bool_tensors():
    model = build_detector(_cfg())
    masks = [BitmapMasks(np.zeros((2, 32, 32), np.uint8), 32, 32),
             BitmapMasks(np.zeros((0, 32, 32), np.uint8), 32, 32)]
    losses = model(torch.randn(2, 3, 32, 32), [img_meta(32, 32), img_meta(32, 32)],
                   gt_masks=masks, gt_labels=[torch.tensor([0, 1]), torch.zeros(0).long()])
    assert list(losses) == ['loss_mask']
    assert model.mask_head.seen == [(2, 32, 32), (0, 32, 32)]


def test_simple_test_format():
    model = build_detector(_cfg()).eval()
    metas = [img_meta(32, 32), img_meta(32, 32)]
    with torch.no_grad():
        results = model(img=[torch.randn(2, 3, 32, 32)], img_metas=[metas], return_loss=False)
    (bboxes, segms), (bboxes_empty, segms_empty) = results
    assert len(bboxes) == len(segms) == 3
    assert [len(b) for b in bboxes] == [1, 0, 1] and [len(s) for s in segms] == [1, 0, 1]
    assert all(b.dtype == np.float32 and b.shape[1] == 5 for b in bboxes)
    np.testing.assert_allclose(bboxes[2], [[0, 0, 0, 0, 0.9]], rtol=1e-6)
    assert segms[2][0].dtype == bool and segms[2][0].sum() == 20
    assert [b.shape for b in bboxes_empty] == [(0, 5)] * 3 and segms_empty == [[], [], []]
    # show_result boxes a dummy box by its mask's extent
    img = model.show_result(np.zeros((32, 32, 3), np.uint8), results[0], score_thr=0.0)
    assert img.shape == (32, 32, 3)


def test_refusals():
    cfg = _cfg()
    cfg.pop('mask_head')
    with pytest.raises(ValueError, match='mask_head'):
        build_detector(cfg)
    model = build_detector(_cfg())
    with pytest.raises(NotImplementedError):
        model.forward_dummy(torch.randn(1, 3, 32, 32))
