"""ResNet: with_cp is exact, saves memory, loads torchvision weights, rejects bad arguments."""

import pytest
import torch
import torchvision
from torch.nn.modules.batchnorm import _BatchNorm

from ckptzoo.models import ResNet, ResNetV1d
from ckptzoo.registry import build_backbone
from ckptzoo.memory.measure.trackers import saved_tensor_bytes
from tests.helpers.checkpointing import expected_checkpoints, train_pass




@pytest.mark.filterwarnings('error')
@pytest.mark.parametrize('input_requires_grad', [True, False])
@pytest.mark.parametrize('norm_eval', [False, True])
@pytest.mark.parametrize('frozen_stages', [-1, 1])
@pytest.mark.parametrize('reentrant', [False, True])
@pytest.mark.parametrize('depth', [18, 50])
def test_with_cp_is_exact(count_cp, depth, reentrant, frozen_stages, norm_eval,
                          input_requires_grad):
    """Non-reentrant runs the very same kernels: compared in float32. Reentrant backward hands
    the convolutions gradients of another memory layout, so float32 differs at rounding level
    (~1e-6 relative); it is compared in float64, where rounding is far below the tolerance."""
    dtype = torch.float64 if reentrant else torch.float32
    torch.manual_seed(depth)
    kwargs = dict(depth=depth, base_channels=8, frozen_stages=frozen_stages,
                  norm_eval=norm_eval, zero_init_residual=False, cp_use_reentrant=reentrant)
    plain = ResNet(**kwargs, with_cp=False).to(dtype).train()
    with torch.no_grad():  # non-trivial BN statistics and affine parameters
        for m in plain.modules():
            if isinstance(m, _BatchNorm):
                m.running_mean.uniform_(-0.5, 0.5)
                m.running_var.uniform_(0.5, 2.0)
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.2, 0.2)
    ckpt = ResNet(**kwargs, with_cp=True).to(dtype).train()
    ckpt.load_state_dict(plain.state_dict())
    x = torch.randn(2, 3, 32, 32, dtype=dtype, requires_grad=input_requires_grad)
    weights = [torch.randn_like(o) for o in plain(x)]
    plain.load_state_dict(ckpt.state_dict())  # undo the BN update of the shape probe

    ref = train_pass(plain, x, weights)
    assert count_cp['checkpoints'] == 0
    out = train_pass(ckpt, x, weights)
    assert count_cp['checkpoints'] == expected_checkpoints(depth, frozen_stages, reentrant,
                                                            input_requires_grad)

    for a, b in zip(out[0], ref[0]):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-6)
    if input_requires_grad:
        torch.testing.assert_close(out[1], ref[1], rtol=0, atol=1e-6)
    assert set(out[2]) == set(ref[2])
    for name, grad in ref[2].items():
        assert grad is not None and out[2][name] is not None, name  # every one gets a gradient
        torch.testing.assert_close(out[2][name], grad, rtol=0, atol=1e-6, msg=name)
    for name, buf in ref[3].items():
        torch.testing.assert_close(out[3][name], buf, rtol=0, atol=1e-6, msg=name)
    frozen = [n for n, p in ckpt.named_parameters() if not p.requires_grad]
    assert bool(frozen) == (frozen_stages >= 0)
    assert all(dict(ckpt.named_parameters())[n].grad is None for n in frozen)


@pytest.mark.filterwarnings('error')
def test_no_grad_and_eval_recompute_nothing(count_cp):
    model = ResNet(18, base_channels=8, with_cp=True).train()
    x = torch.randn(1, 3, 32, 32, requires_grad=True)
    with torch.no_grad():
        outs = model(x)
    assert count_cp['checkpoints'] == 0
    model.eval()
    ref = ResNet(18, base_channels=8, with_cp=False).eval()
    ref.load_state_dict(model.state_dict())
    outs = model(x)
    sum(o.sum() for o in outs).backward()
    assert count_cp['checkpoints'] == 0
    for a, b in zip(outs, ref(x)):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


@pytest.mark.parametrize('frozen_stages,limit', [(-1, 0.20), (1, 0.22)])
def test_resnet50_saved_bytes(frozen_stages, limit):
    """Deterministic byte count of what autograd keeps (not a timing)."""
    x = torch.randn(2, 3, 224, 224)
    ratios = {}
    plain_bytes, _ = saved_tensor_bytes(
        ResNet(50, frozen_stages=frozen_stages, with_cp=False).train(), x)
    for reentrant in (False, True):
        model = ResNet(50, frozen_stages=frozen_stages, with_cp=True,
                       cp_use_reentrant=reentrant).train()
        cp_bytes, _ = saved_tensor_bytes(model, x)
        ratios[reentrant] = cp_bytes / plain_bytes
    assert ratios[False] <= limit, ratios
    # the reentrant implementation checkpoints what mmdet does (no stem, nothing behind a frozen
    # stage): the saving comes from the stem and the first trainable block, not the model
    mmdet_reference = {-1: 0.237, 1: 0.251}[frozen_stages]
    assert abs(ratios[True] - mmdet_reference) < 0.005, ratios
    assert ratios[False] < ratios[True] - 0.04, ratios


def _torchvision_stages(tv, x):
    x = tv.maxpool(tv.relu(tv.bn1(tv.conv1(x))))
    outs = []
    for layer in (tv.layer1, tv.layer2, tv.layer3, tv.layer4):
        x = layer(x)
        outs.append(x)
    return outs


@pytest.mark.parametrize('depth', [18, 50])
def test_loads_torchvision_state_dict(depth, tmp_path):
    torch.manual_seed(0)
    tv = getattr(torchvision.models, f'resnet{depth}')()
    with torch.no_grad():
        for m in tv.modules():
            if isinstance(m, _BatchNorm):
                m.running_mean.uniform_(-0.1, 0.1)
                m.running_var.uniform_(0.5, 1.5)
    state = {k: v for k, v in tv.state_dict().items() if not k.startswith('fc.')}
    model = ResNet(depth, zero_init_residual=False)
    model.load_state_dict(state, strict=True)
    x = torch.randn(1, 3, 64, 64)
    tv.eval()
    model.eval()
    with torch.no_grad():
        for a, b in zip(model(x), _torchvision_stages(tv, x)):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
    # the same weights through init_cfg, from a local file
    path = tmp_path / 'tv.pth'
    torch.save(tv.state_dict(), path)
    loaded = ResNet(depth, init_cfg=dict(type='Pretrained', checkpoint=str(path)))
    loaded.init_weights()
    for k, v in model.state_dict().items():
        torch.testing.assert_close(loaded.state_dict()[k], v, rtol=0, atol=0)


def test_torchvision_url_resolves_from_hub_cache_only(tmp_path):
    old_hub = torch.hub.get_dir()
    torch.hub.set_dir(str(tmp_path / 'hub'))
    try:
        model = ResNet(18, init_cfg=dict(type='Pretrained', checkpoint='torchvision://resnet18'))
        with pytest.raises(FileNotFoundError, match=r'hub.*checkpoints.*resnet18-'):
            model.init_weights()
        ref = torchvision.models.resnet18()
        (tmp_path / 'hub' / 'checkpoints').mkdir(parents=True)
        from mmengine.runner.checkpoint import get_torchvision_models
        name = get_torchvision_models()['resnet18'].rsplit('/', 1)[1]
        torch.save(ref.state_dict(), tmp_path / 'hub' / 'checkpoints' / name)
        model.init_weights()
        torch.testing.assert_close(model.conv1.weight, ref.conv1.weight, rtol=0, atol=0)
    finally:
        torch.hub.set_dir(old_hub)


def test_frozen_stages_stay_frozen_after_train():
    model = ResNet(18, base_channels=8, frozen_stages=2, norm_eval=False)
    model.train()
    assert not model.conv1.weight.requires_grad and not model.bn1.training
    assert not model.layer2.training and not any(p.requires_grad for p in model.layer2.parameters())
    assert model.layer3.training and all(p.requires_grad for p in model.layer3.parameters())
    model = ResNet(18, base_channels=8, norm_eval=True).train()
    assert not any(m.training for m in model.modules() if isinstance(m, _BatchNorm))
    assert model.layer1[0].training


def test_architecture_options_build_and_run():
    x = torch.randn(1, 3, 64, 64)
    for kwargs in [dict(depth=50, style='caffe'), dict(depth=18, deep_stem=True, avg_down=True),
                   dict(depth=18, num_stages=3, out_indices=(2, ), strides=(1, 2, 2),
                        dilations=(1, 1, 2)),
                   dict(depth=18, norm_cfg=dict(type='GN', num_groups=4)),
                   dict(depth=18, with_cp=(True, False, True, False)),
                   dict(type='ResNetV1d', depth=18)]:
        cfg = dict(type='ResNet', base_channels=8)
        cfg.update(kwargs)
        model = build_backbone(cfg).train()
        outs = model(x)
        assert len(outs) == len(cfg.get('out_indices', (0, 1, 2, 3)))
        sum(o.sum() for o in outs).backward()
    caffe = ResNet(50, style='caffe', base_channels=8)
    assert caffe.layer2[0].conv1.stride == (2, 2) and caffe.layer2[0].conv2.stride == (1, 1)
    gn = ResNet(18, base_channels=8, norm_cfg=dict(type='GN', num_groups=4))
    assert 'layer1.0.gn1.weight' in gn.state_dict()
    frozen_bn = ResNet(18, base_channels=8, norm_cfg=dict(type='BN', requires_grad=False))
    assert not frozen_bn.bn1.weight.requires_grad


@pytest.mark.parametrize('kwargs,error,match', [
    (dict(depth=42), ValueError, r"invalid depth 42 .*allowed are 18, 34, 50, 101, 152"),
    (dict(depth=18, num_stages=5), ValueError, r'num_stages must be an int in 1\.\.4, got 5'),
    (dict(depth=18, num_stages=0), ValueError, r'num_stages must be an int in 1\.\.4, got 0'),
    (dict(depth=18, num_stages=2, out_indices=(0, 2)), ValueError,
     r'out_indices must be stage indices in 0\.\.1 .*got \(0, 2\)'),
    (dict(depth=18, with_cp=(True, False)), ValueError,
     r'with_cp must be a bool or a tuple of 4 bools .*got \(True, False\)'),
    (dict(depth=18, norm_cfg=dict(type='BatchNorm')), ValueError,
     r"unknown norm type 'BatchNorm': allowed are BN, .*GN"),
    (dict(depth=18, style='tf'), ValueError, r"style must be 'pytorch' or 'caffe', got 'tf'"),
    (dict(depth=18, frozen_stages=7), ValueError, r'frozen_stages must be an int in -1\.\.4'),
])
def test_bad_arguments(kwargs, error, match):
    with pytest.raises(error, match=match):
        ResNet(**kwargs)


def test_caffe_style_with_frozen_norms_as_mmdet_caffe_configs():
    """mmdet's ``retinanet_r50_caffe_fpn``: stride on the first 1x1 conv, BN frozen and eval."""
    import torch.nn.functional as F
    from ckptzoo.registry import build_optimizer
    cfg = dict(type='ResNet', depth=50, base_channels=8, num_stages=4, out_indices=(0, 1, 2, 3),
               frozen_stages=1, norm_cfg=dict(type='BN', requires_grad=False), norm_eval=True,
               style='caffe')
    model = build_backbone(cfg)
    pytorch_style = build_backbone(dict(cfg, style='pytorch'))
    for stage in (model.layer2, model.layer3, model.layer4):
        assert stage[0].conv1.stride == (2, 2) and stage[0].conv2.stride == (1, 1)
    assert pytorch_style.layer2[0].conv1.stride == (1, 1)
    assert pytorch_style.layer2[0].conv2.stride == (2, 2)
    bn = [m for m in model.modules() if isinstance(m, _BatchNorm)]
    assert all(not p.requires_grad for m in bn for p in m.parameters())
    opt = build_optimizer(model, dict(type='SGD', lr=0.01, momentum=0.9, weight_decay=1e-4))
    trainable = [p for n, p in model.named_parameters() if p.requires_grad]
    assert len(opt.param_groups[0]['params']) == len(trainable) and all(
        'conv' in n or 'downsample.0' in n for n, p in model.named_parameters()
        if p.requires_grad)
    model.train()
    assert all(not m.training for m in bn)
    before = {n: b.clone() for n, b in model.named_buffers()}
    x = torch.randn(1, 3, 64, 64)
    outs = model(x)
    assert [o.shape[-1] for o in outs] == [16, 8, 4, 2]
    for n, b in model.named_buffers():
        torch.testing.assert_close(b, before[n], rtol=0, atol=0)
    # layer2's first block by hand: 1x1 conv with stride 2, then the 3x3 with stride 1
    block, inp = model.layer2[0], outs[0]
    with torch.no_grad():
        y = F.relu(block.bn1(F.conv2d(inp, block.conv1.weight, stride=2)))
        y = F.relu(block.bn2(F.conv2d(y, block.conv2.weight, stride=1, padding=1)))
        y = block.bn3(F.conv2d(y, block.conv3.weight))
        y = F.relu(y + block.downsample(inp))
        torch.testing.assert_close(torch.nn.Sequential(*list(model.layer2)[1:])(y), outs[1],
                                   rtol=1e-5, atol=1e-5)


def test_stage_forward_hooks_fire_without_segments():
    """mmdet users hook ``backbone.layerN`` to read features: without segments the stages run
    as modules; with a segment the same outputs come back through the chain."""
    torch.manual_seed(0)
    model = ResNet(18, base_channels=8, out_indices=(1, 3)).train()
    seen = []
    for name in ('layer2', 'layer4'):
        getattr(model, name).register_forward_hook(lambda m, i, o: seen.append(o.detach()))
    x = torch.randn(2, 3, 32, 32)
    torch.manual_seed(1)
    outs = model(x)
    assert len(seen) == 2
    assert all(torch.equal(a.detach(), b) for a, b in zip(outs, seen))
    model.set_checkpoint_segments([['layer1.0', 'layer3.1']])
    torch.manual_seed(1)
    seg_outs = model(x)
    assert all(torch.equal(a.detach(), b.detach()) for a, b in zip(outs, seg_outs))


GCB = dict(type='ContextBlock', ratio=1. / 4)
PLUGINS = [dict(cfg=GCB, stages=(False, True, True, True), position='after_conv3'),
           dict(cfg=dict(type='NonLocal2d', postfix='1'), stages=(False, False, True, False),
                position='after_conv2'),
           dict(cfg=dict(type='GeneralizedAttention', spatial_range=-1, num_heads=2,
                         attention_type='0010', kv_stride=2), position='after_conv1')]


def test_plugins_attach_as_mmdet_with_its_state_dict_names():
    model = ResNet(50, base_channels=8, plugins=PLUGINS)
    keys = model.state_dict().keys()
    assert not any('context_block' in k for k in keys if k.startswith('layer1.'))
    assert 'layer2.3.context_block.conv_mask.weight' in keys
    assert 'layer4.2.context_block.channel_add_conv.3.weight' in keys
    assert 'layer3.0.nonlocal_block1.conv_out.conv.weight' in keys
    assert not any('nonlocal_block' in k for k in keys if not k.startswith('layer3.'))
    assert any(k.startswith('layer1.0.gen_attention_block.') for k in keys)
    block = model.layer3[0]
    # mmdet's channels: conv1 / conv2 outputs (planes), conv3's (planes * 4)
    assert block.gen_attention_block.in_channels == 32
    assert block.nonlocal_block1.in_channels == 32
    assert block.context_block.in_channels == 128
    names = [n for n, _ in block.named_children()]
    assert names[-3:] == ['gen_attention_block', 'nonlocal_block1', 'context_block']
    # initialised as mmdet without pretrained weights: kaiming convs (bias 0), then the
    # plugins' own init_weights (NonLocal2d's zero output norm)
    assert block.context_block.conv_mask.bias.abs().sum() == 0
    assert block.context_block.channel_add_conv[3].weight.abs().sum() > 0
    assert block.nonlocal_block1.conv_out.conv.weight.abs().sum() == 0
    out = model(torch.randn(1, 3, 64, 64))
    assert [o.shape[1] for o in out] == [32, 64, 128, 256]


def test_pretrained_resnet_keeps_the_plugins_own_init():
    model = ResNet(50, base_channels=8, plugins=PLUGINS[:1],
                   init_cfg=dict(type='Pretrained', checkpoint='torchvision://resnet50'))
    assert model.layer2[0].context_block.channel_add_conv[3].weight.abs().sum() == 0


def test_resnext_plugins_see_the_grouped_width():
    model = build_backbone(dict(type='ResNeXt', depth=50, groups=4, base_width=4,
                                base_channels=8, plugins=PLUGINS[1:2] + PLUGINS[:1]))
    block = model.layer3[0]
    assert block.nonlocal_block1.in_channels == block.conv2.out_channels == 64
    assert [n for n, _ in block.named_children()][-2:] == ['nonlocal_block1', 'context_block']


@pytest.mark.parametrize('plugins,error,match', [
    ([dict(cfg=GCB, position='after_conv4')], ValueError, 'after_conv1, after_conv2'),
    ([dict(cfg=GCB, position='after_conv3')] * 2, ValueError, 'duplicate plugin context_block'),
    ([dict(cfg=GCB, stages=(True, ), position='after_conv3')], ValueError, 'stages need 4 entries'),
])
def test_bad_plugins(plugins, error, match):
    with pytest.raises(error, match=match):
        ResNet(50, base_channels=8, plugins=plugins)
    with pytest.raises(NotImplementedError, match='BasicBlock takes no plugins'):
        ResNet(18, base_channels=8, plugins=[dict(cfg=GCB, position='after_conv3')])


def test_conv_ws_and_mmsyncbn_everywhere():
    model = ResNet(50, base_channels=8, deep_stem=True, avg_down=True,
                   conv_cfg=dict(type='ConvWS'), norm_cfg=dict(type='MMSyncBN'))
    convs = [m for m in model.modules() if isinstance(m, torch.nn.Conv2d)]
    assert convs and all(type(m).__name__ == 'ConvWS2d' for m in convs)
    plain = ResNet(50, base_channels=8, deep_stem=True, avg_down=True)
    assert list(model.state_dict()) == list(plain.state_dict())
    model.eval()(torch.randn(1, 3, 32, 32))


@pytest.mark.filterwarnings("ignore:checkpoint mode 'offload'")  # nothing to offload on a CPU
@pytest.mark.filterwarnings('error')
@pytest.mark.parametrize('mode', ['full', 'selective', 'offload'])
@pytest.mark.parametrize('frozen_stages', [-1, 1])
def test_plugins_run_inside_the_block_unit_exactly(count_cp, mode, frozen_stages):
    torch.manual_seed(0)
    kwargs = dict(depth=50, base_channels=8, frozen_stages=frozen_stages, norm_eval=False,
                  zero_init_residual=False, conv_cfg=dict(type='ConvWS'),
                  plugins=PLUGINS[:2] + [dict(cfg=dict(GCB, pooling_type='avg', postfix=2,
                                                       fusion_types=('channel_mul', )),
                                              position='after_conv1')])
    plain = ResNet(**kwargs).train()
    with torch.no_grad():  # non-zero plugin outputs and BN statistics
        for m in plain.modules():
            if isinstance(m, _BatchNorm):
                m.running_mean.uniform_(-0.5, 0.5)
                m.running_var.uniform_(0.5, 2.0)
        for name, p in plain.named_parameters():
            if 'context_block' in name or 'nonlocal' in name:
                p.normal_(0, 0.1)
    ckpt = ResNet(**kwargs).train()
    ckpt.load_state_dict(plain.state_dict())
    ckpt.set_checkpoint_plan({name: mode for name in ckpt.checkpoint_units()})
    x = torch.randn(2, 3, 32, 32, requires_grad=True)
    weights = [torch.randn_like(o) for o in plain(x)]
    plain.load_state_dict(ckpt.state_dict())
    ref = train_pass(plain, x, weights)
    out = train_pass(ckpt, x, weights)
    assert (count_cp['checkpoints'] > 0) == (mode != 'offload')  # offload: none on a CPU
    for a, b in zip(out[0], ref[0]):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    torch.testing.assert_close(out[1], ref[1], rtol=0, atol=0)
    for name, grad in ref[2].items():
        assert out[2][name] is not None, name
        torch.testing.assert_close(out[2][name], grad, rtol=0, atol=0, msg=name)
    for name, buf in ref[3].items():
        torch.testing.assert_close(out[3][name], buf, rtol=0, atol=0, msg=name)


def test_resnetv1d_keys_are_mmdets():
    """mmdet's ResLayer pools before the downsample conv in every avg_down stage, stride 1
    included, so a ResNetV1d checkpoint's layer1 keys read ``downsample.1`` / ``.2``."""
    keys = ResNetV1d(depth=50, base_channels=8).state_dict().keys()
    for stage in (1, 2, 3, 4):
        assert f'layer{stage}.0.downsample.1.weight' in keys
        assert f'layer{stage}.0.downsample.2.running_mean' in keys
        assert f'layer{stage}.0.downsample.0.weight' not in keys
