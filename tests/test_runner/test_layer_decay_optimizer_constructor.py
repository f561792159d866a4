"""mmdet 2.x's LearningRateDecayOptimizerConstructor (the ConvNeXt configs' optimizer); the
groups were compared with mmdet 2.28.2's constructor on the same model: identical names,
parameters, lr, lr_scale and weight decay."""
import pytest
import torch.nn as nn

from ckptzoo.registry import build_backbone, build_optimizer

OPTIMIZER = dict(type='AdamW', lr=0.0002, betas=(0.9, 0.999), weight_decay=0.05,
                 constructor='LearningRateDecayOptimizerConstructor')


class _Detector(nn.Module):
    def __init__(self, frozen_stages=0, backbone='mmcls.ConvNeXt'):
        super().__init__()
        self.backbone = build_backbone(dict(type=backbone, arch='tiny', out_indices=[0, 1, 2, 3],
                                            gap_before_final_norm=False,
                                            frozen_stages=frozen_stages)) \
            if backbone == 'mmcls.ConvNeXt' else build_backbone(dict(type=backbone, depth=18))
        self.neck = nn.Conv2d(8, 8, 1)


def _groups(model, **paramwise):
    cfg = dict(OPTIMIZER, paramwise_cfg=dict(decay_rate=0.7, num_layers=6, **paramwise))
    return build_optimizer(model, cfg).param_groups


def test_layer_wise_groups_as_mmdet():
    groups = _groups(_Detector(), decay_type='layer_wise')
    by_name = {g['group_name']: g for g in groups}
    # in the order of the parameters: the downsampling layers come first (mmdet's order)
    assert [g['group_name'] for g in groups] == [
        'layer_0_decay', 'layer_0_no_decay', 'layer_2_no_decay', 'layer_2_decay',
        'layer_3_no_decay', 'layer_3_decay', 'layer_6_no_decay', 'layer_6_decay',
        'layer_1_no_decay', 'layer_1_decay', 'layer_4_no_decay', 'layer_4_decay',
        'layer_5_no_decay', 'layer_5_decay', 'layer_7_no_decay', 'layer_7_decay']
    for layer_id in range(8):  # num_layers + 2 = 8 ids
        scale = 0.7**(8 - layer_id - 1)
        for kind, wd in (('decay', 0.05), ('no_decay', 0.0)):
            group = by_name[f'layer_{layer_id}_{kind}']
            assert group['lr_scale'] == scale and group['lr'] == scale * 0.0002
            assert group['weight_decay'] == wd
    assert by_name['layer_0_decay']['param_names'] == ['backbone.downsample_layers.0.0.weight']
    assert 'backbone.stages.2.8.pointwise_conv1.weight' in by_name['layer_5_decay']['param_names']
    assert 'backbone.norm3.weight' in by_name['layer_7_no_decay']['param_names']  # the rest
    assert by_name['layer_7_decay']['param_names'] == ['neck.weight']
    assert 'backbone.stages.1.0.gamma' in by_name['layer_2_no_decay']['param_names']


def test_stage_wise_and_frozen_parameters():
    model = _Detector(frozen_stages=1)
    groups = _groups(model, decay_type='stage_wise')
    names = [n for g in groups for n in g['param_names']]
    frozen = ('backbone.downsample_layers.0', 'backbone.stages.0')
    assert not any(n.startswith(frozen) for n in names)
    assert len(names) == sum(p.requires_grad for p in model.parameters())
    by_name = {g['group_name']: g for g in groups}
    assert by_name['layer_4_decay']['param_names'][0] == 'backbone.stages.3.0.depthwise_conv.weight'
    assert by_name['layer_7_decay']['param_names'] == ['neck.weight']  # num_layers + 2 - 1
    assert by_name['layer_0_no_decay']['lr_scale'] == 0.7**7


@pytest.mark.parametrize('paramwise, error, match', [
    (dict(decay_rate=0.7, num_layers=6, decay_type='block_wise'), ValueError,
     'decay_type must be one of layer_wise, stage_wise'),
    (dict(decay_rate=0.7), ValueError, 'num_layers must be a positive int'),
    (dict(decay_rate=0.7, num_layers=6, custom_keys={}), KeyError, "unknown paramwise_cfg key"),
])
def test_bad_paramwise_cfg(paramwise, error, match):
    with pytest.raises(error, match=match):
        build_optimizer(_Detector(), dict(OPTIMIZER, paramwise_cfg=paramwise))


def test_other_backbones_are_refused_as_in_mmdet():
    with pytest.raises(NotImplementedError, match='ConvNeXt backbone .* got ResNet'):
        _groups(_Detector(backbone='ResNet'), decay_type='layer_wise')
