"""HybridTaskCascadeRoIHead, HTCMaskHead and FusedSemanticHead on their own: bad configs
refused at build, the unit order and plan keys, the mask information flow, the samplers at
capacity, and the semantic head's loss."""
import pytest
import torch

from ckptzoo.core.bbox import restore_sampling_at_capacity, set_sampling_at_capacity
from ckptzoo.registry import MODELS

from tests.helpers.detectors import htc_cfg


def _head_cfg(**kw):
    cfg = htc_cfg(**kw)
    return dict(cfg['roi_head'], train_cfg=cfg['train_cfg']['rcnn'],
                test_cfg=cfg['test_cfg']['rcnn'])


def _head(**kw):
    torch.manual_seed(0)
    return MODELS.build(_head_cfg(**kw))


def test_units_in_training_order_and_with_cp():
    head = _head()
    assert list(head.checkpoint_units()) == ['semantic', 'bbox.0', 'mask.0', 'bbox.1',
                                             'mask.1', 'bbox.2', 'mask.2']
    assert list(_head(with_semantic=False).checkpoint_units())[0] == 'bbox.0'
    cfg = _head_cfg()
    cfg['with_cp'] = True
    plan = MODELS.build(cfg).checkpoint_plan()
    assert set(plan.values()) == {'full'}
    # the mask unit of stage 2 holds every mask head it runs (the information flow)
    assert head._mask_modules(2)[1:4] == list(head.mask_head)


def test_samplers_of_every_stage_are_set_at_capacity():
    head = _head()
    states = set_sampling_at_capacity(head)
    assert {id(s) for s, _ in states} == {id(s) for s in head.bbox_sampler}
    assert len(states) == 3
    restore_sampling_at_capacity(states)


@pytest.mark.parametrize('change, error, match', [
    (lambda c: c.pop('semantic_roi_extractor'), ValueError, 'semantic_roi_extractor'),
    (lambda c: c.update(semantic_fusion=('bbox', 'segm')), ValueError, 'semantic_fusion'),
    (lambda c: c['mask_head'][1].update(with_conv_res=False), ValueError, 'with_conv_res'),
    (lambda c: c['mask_head'][0].update(type='FCNMaskHead', with_conv_res=None) or
     c['mask_head'][0].pop('with_conv_res'), TypeError, 'HTCMaskHead'),
])
def test_bad_configs_are_refused_at_build(change, error, match):
    cfg = _head_cfg()
    change(cfg)
    with pytest.raises(error, match=match):
        MODELS.build(cfg)


def test_htc_mask_head_takes_and_returns_the_feature():
    torch.manual_seed(0)
    first = MODELS.build(dict(type='HTCMaskHead', with_conv_res=False, num_convs=1,
                              in_channels=8, conv_out_channels=8, num_classes=2))
    second = MODELS.build(dict(type='HTCMaskHead', num_convs=1, in_channels=8,
                               conv_out_channels=8, num_classes=2))
    x = torch.randn(3, 8, 14, 14)
    logits, feat = first(x)
    assert logits.shape == (3, 2, 28, 28) and feat.shape == (3, 8, 14, 14)
    assert torch.equal(first(x, return_logits=False), feat)
    assert torch.equal(first(x, return_feat=False), logits)
    expected = second.convs[0](x + second.conv_res(feat))
    torch.testing.assert_close(second(x, feat, return_logits=False), expected)
    assert 'conv_res.conv.weight' in second.state_dict()
    with pytest.raises(ValueError, match='with_conv_res'):
        first(x, feat)


def test_fused_semantic_head_outputs_loss_and_ignore():
    torch.manual_seed(0)
    head = MODELS.build(dict(type='FusedSemanticHead', num_ins=3, fusion_level=1, num_convs=1,
                             in_channels=8, conv_out_channels=8, num_classes=4))
    feats = [torch.randn(2, 8, 32 // 2**i, 32 // 2**i) for i in range(3)]
    pred, feat = head(feats)
    assert pred.shape == (2, 4, 16, 16) and feat.shape == (2, 8, 16, 16)
    labels = torch.randint(0, 4, (2, 1, 16, 16))
    loss = head.loss(pred, labels)
    ce = torch.nn.functional.cross_entropy(pred, labels[:, 0])
    torch.testing.assert_close(loss, 0.2 * ce)
    labels[:, :, :8] = 255  # ignored pixels count in the mean, as mmdet (avg_non_ignore=False)
    ce = torch.nn.functional.cross_entropy(pred, labels[:, 0], ignore_index=255,
                                           reduction='none').mean()
    torch.testing.assert_close(head.loss(pred, labels), 0.2 * ce)
    with pytest.raises(ValueError, match='gt_semantic_seg of shape'):
        head.loss(pred, labels[:, :, :8])
    with pytest.warns(UserWarning, match='deprecated'):
        old = MODELS.build(dict(type='FusedSemanticHead', num_ins=3, fusion_level=1,
                                ignore_label=7, in_channels=8, conv_out_channels=8))
    assert old.criterion.ignore_index == 7
    # the default loss_seg is not changed by another head's ignore_label (mmdet's was)
    fresh = MODELS.build(dict(type='FusedSemanticHead', num_ins=3, fusion_level=1,
                              in_channels=8, conv_out_channels=8))
    assert fresh.criterion.ignore_index == 255
    with pytest.raises(ValueError, match='fusion_level'):
        MODELS.build(dict(type='FusedSemanticHead', num_ins=2, fusion_level=2))
