"""SCNet's RoI parts: ``SCNetBBoxHead``'s shared feature, ``SCNetMaskHead`` /
``SCNetSemanticHead`` with ``conv_to_res``, ``FeatureRelayHead``, ``GlobalContextHead`` and
its loss, and ``SCNetRoIHead``'s context fusion, positive slicing and units."""
import pytest
import torch
import torch.nn.functional as F

from ckptzoo.models.roi_heads import (FeatureRelayHead, GlobalContextHead, SCNetBBoxHead,
                                      SCNetMaskHead, SCNetRoIHead, SCNetSemanticHead)
from ckptzoo.models.utils import SimplifiedBasicBlock
from ckptzoo.registry import MODELS

from tests.helpers.scnet import scnet_cfg


def test_bbox_head_returns_the_shared_feature_on_request():
    torch.manual_seed(0)
    head = SCNetBBoxHead(num_shared_fcs=2, in_channels=4, fc_out_channels=8, roi_feat_size=3,
                         num_classes=3)
    x = torch.randn(5, 4, 3, 3)
    cls_score, bbox_pred = head(x)
    cls2, reg2, shared = head(x, return_shared_feat=True)
    assert shared.shape == (5, 8)
    torch.testing.assert_close(cls2, cls_score, rtol=0, atol=0)
    torch.testing.assert_close(head.fc_cls(shared), cls_score, rtol=0, atol=0)


def test_mask_and_semantic_heads_stack_simplified_basic_blocks():
    mask = SCNetMaskHead(num_convs=4, in_channels=8, conv_out_channels=8, num_classes=3)
    assert mask.num_res_blocks == 2 and all(isinstance(b, SimplifiedBasicBlock)
                                            for b in mask.convs)
    assert mask(torch.randn(2, 8, 14, 14)).shape == (2, 3, 28, 28)
    assert len(SCNetMaskHead(conv_to_res=False, num_convs=4, in_channels=8,
                             conv_out_channels=8).convs) == 4
    with pytest.raises(ValueError, match='conv_kernel_size=3'):
        SCNetMaskHead(conv_kernel_size=5)
    sem = SCNetSemanticHead(num_ins=3, fusion_level=1, num_convs=4, in_channels=8,
                            conv_out_channels=8, num_classes=5)
    assert sem.num_convs == 2 and len(sem.convs) == 2
    pred, feat = sem([torch.randn(1, 8, 16, 16), torch.randn(1, 8, 8, 8),
                      torch.randn(1, 8, 4, 4)])
    assert pred.shape == (1, 5, 8, 8) and feat.shape == (1, 8, 8, 8)


def test_simplified_basic_block_has_no_last_relu_and_biases_without_norm():
    block = SimplifiedBasicBlock(4, 4, norm_cfg=None)
    assert block.conv1.bias is not None and block.norm1 is None
    x = torch.randn(1, 4, 5, 5)
    expected = block.conv2(F.relu(block.conv1(x))) + x
    torch.testing.assert_close(block(x), expected)
    assert SimplifiedBasicBlock(4, 4).conv1.bias is None
    with pytest.raises(NotImplementedError):
        SimplifiedBasicBlock(4, 4, with_cp=True)


def test_feature_relay_head_reshapes_and_upsamples():
    head = FeatureRelayHead(in_channels=6, out_conv_channels=2, roi_feat_size=3)
    out = head(torch.randn(4, 6))
    assert out.shape == (4, 2, 6, 6)
    assert head(torch.randn(0, 6)) is None


def test_global_context_head_pools_the_last_level_and_scores_present_classes():
    torch.manual_seed(0)
    head = GlobalContextHead(num_convs=2, in_channels=4, conv_out_channels=4, num_classes=3,
                             loss_weight=3.0)
    pred, ctx = head([torch.randn(2, 4, 8, 8), torch.randn(2, 4, 4, 4)])
    assert pred.shape == (2, 3) and ctx.shape == (2, 4, 1, 1)
    labels = [torch.tensor([0, 2, 2]), torch.tensor([1])]
    targets = torch.tensor([[1., 0., 1.], [0., 1., 0.]])
    torch.testing.assert_close(head.loss(pred, labels),
                               3.0 * F.binary_cross_entropy_with_logits(pred, targets))
    assert len(GlobalContextHead(num_convs=4, conv_to_res=True).convs) == 2


def test_context_is_added_per_image_and_positives_sliced_per_block():
    torch.manual_seed(0)
    roi = MODELS.build(dict(scnet_cfg(with_semantic=False)['roi_head'],
                            train_cfg=None, test_cfg=None))
    feats = torch.randn(3, 2, 4, 4)
    rois = torch.tensor([[1., 0, 0, 4, 4], [0., 0, 0, 4, 4], [1., 1, 1, 3, 3]])
    ctx = torch.randn(2, 2, 1, 1)
    fused, rest = roi._fuse(feats, rois, (ctx, torch.ones(1)))
    torch.testing.assert_close(fused, feats + ctx[[1, 0, 1]])
    assert len(rest) == 1

    class Res:
        def __init__(self, n, pos):
            self.bboxes, self.pos_bboxes = torch.zeros(n, 4), torch.zeros(pos, 4)
    sliced = SCNetRoIHead._slice_pos_feats(torch.arange(7.)[:, None], [Res(4, 2), Res(3, 1)])
    assert sliced.flatten().tolist() == [0., 1., 4.]


def test_units_and_a_mask_branch_required():
    cfg = dict(scnet_cfg()['roi_head'], train_cfg=None, test_cfg=None)
    roi = MODELS.build(cfg)
    assert roi.with_semantic and roi.with_glbctx and roi.with_feat_relay
    assert list(roi.checkpoint_units()) == [
        'semantic', 'glbctx', 'bbox.0', 'bbox.1', 'bbox.2', 'mask']
    cfg.pop('mask_head')
    with pytest.raises(ValueError, match='mask branch'):
        MODELS.build(cfg)
