import copy
import re

import pytest
import torch
import torch.utils.checkpoint as torch_cp

from ckptzoo.models.backbones import ConvNeXt
from ckptzoo.registry import build_model

from tests.helpers.checkpointing import CountingCheckpoint, assert_same_run, one_thread, run_once

_one_thread = pytest.fixture(autouse=True)(one_thread)

TINY = dict(depths=[2, 1, 2, 1], channels=[8, 16, 24, 32])
SIZE = (45, 61)


def _tiny(**kwargs):
    kwargs = {'out_indices': (0, 1, 2, 3), 'gap_before_final_norm': False,
              'layer_scale_init_value': 1.0, **kwargs}
    model = ConvNeXt(arch=TINY, **kwargs)
    with torch.no_grad():  # non-trivial norms, biases and layer scales
        for name, p in model.named_parameters():
            if 'norm' in name or name.endswith('bias') or name.endswith('gamma'):
                p.add_(torch.randn_like(p) * 0.2)
    return model


def test_mmcls_keys_and_shapes():
    model = ConvNeXt('tiny')  # mmcls's defaults: out_indices=-1, gap_before_final_norm=True
    shapes = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    assert len(shapes) == 4 + 12 + 18 * 9 + 2
    assert {k: shapes[k] for k in (
        'downsample_layers.0.0.weight', 'downsample_layers.0.1.weight',
        'downsample_layers.1.0.weight', 'downsample_layers.1.1.weight',
        'stages.0.0.depthwise_conv.weight', 'stages.0.0.norm.bias',
        'stages.0.0.pointwise_conv1.weight', 'stages.0.0.pointwise_conv2.weight',
        'stages.0.0.gamma', 'stages.2.8.gamma', 'norm3.weight')} == {
        'downsample_layers.0.0.weight': (96, 3, 4, 4), 'downsample_layers.0.1.weight': (96, ),
        'downsample_layers.1.0.weight': (96, ), 'downsample_layers.1.1.weight': (192, 96, 2, 2),
        'stages.0.0.depthwise_conv.weight': (96, 1, 7, 7), 'stages.0.0.norm.bias': (96, ),
        'stages.0.0.pointwise_conv1.weight': (384, 96),
        'stages.0.0.pointwise_conv2.weight': (96, 384), 'stages.0.0.gamma': (96, ),
        'stages.2.8.gamma': (384, ), 'norm3.weight': (768, )}
    assert torch.all(model.stages[0][0].gamma == 1e-6)
    assert model.stages[0][0].norm.eps == 1e-6
    (out, ) = model(torch.randn(2, 3, 64, 64))
    assert out.shape == (2, 768)  # pooled before the norm: classification
    assert model.out_channels == (768, )


def test_detection_outputs():
    model = _tiny(out_indices=[0, 1, 2, -1])
    outs = model(torch.randn(2, 3, *SIZE))
    assert [tuple(o.shape) for o in outs] == [(2, 8, 11, 15), (2, 16, 5, 7), (2, 24, 2, 3),
                                              (2, 32, 1, 1)]
    assert all(o.is_contiguous() for o in outs)
    assert model.out_channels == (8, 16, 24, 32)
    assert {f'norm{i}' for i in range(4)} <= set(dict(model.named_children()))


def test_layer_norm_2d_is_a_channel_layer_norm():
    model = _tiny(out_indices=(1, ))
    norm = model.norm1
    x = torch.randn(2, 16, 5, 7)
    want = torch.nn.functional.layer_norm(x.permute(0, 2, 3, 1), (16, ), norm.weight, norm.bias,
                                          norm.eps).permute(0, 3, 1, 2)
    torch.testing.assert_close(norm(x), want, rtol=0, atol=0)


def test_conv_pointwise_and_no_layer_scale():
    model = _tiny(linear_pw_conv=False, layer_scale_init_value=0)
    sd = model.state_dict()
    assert sd['stages.0.0.pointwise_conv1.weight'].shape == (32, 8, 1, 1)
    assert not any(k.endswith('gamma') for k in sd)
    linear = _tiny(layer_scale_init_value=0)
    linear.load_state_dict({k: v.flatten(1) if v.dim() == 4 and 'pointwise' in k else v
                            for k, v in sd.items()})
    x = torch.randn(1, 3, 32, 32)
    for a, b in zip(model(x), linear(x)):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


def test_units_and_chain():
    model = _tiny(out_indices=(1, 2))
    names = list(model.checkpoint_units())
    assert names == ['downsample_layers.0', 'stages.0.0', 'stages.0.1', 'downsample_layers.1',
                     'stages.1.0', 'downsample_layers.2', 'stages.2.0', 'stages.2.1',
                     'downsample_layers.3', 'stages.3.0']
    assert model.checkpoint_chains()[0][-1] == 'stages.2.1'  # stage 3 never runs
    assert model.checkpoint_chain_exits() == ['stages.1.0']


@pytest.mark.filterwarnings('error')
@pytest.mark.parametrize('reentrant', [False, True])
@pytest.mark.parametrize('frozen_stages, x_grad', [(0, True), (0, False), (2, True)])
def test_with_cp_equals_plain(monkeypatch, reentrant, frozen_stages, x_grad):
    dtype = torch.float64 if reentrant else torch.float32
    torch.manual_seed(0)
    plain = _tiny(frozen_stages=frozen_stages, drop_path_rate=0.2).to(dtype)
    cp = _tiny(frozen_stages=frozen_stages, drop_path_rate=0.2, with_cp=True,
               cp_use_reentrant=reentrant).to(dtype)
    cp.load_state_dict(plain.state_dict())
    assert cp.with_cp and not plain.with_cp
    x = torch.randn(4, 3, *SIZE, dtype=dtype).requires_grad_(x_grad)
    ref = run_once(plain, x, seed=7)
    counter = CountingCheckpoint()
    monkeypatch.setattr(torch_cp, 'checkpoint', counter)
    assert_same_run(ref, run_once(cp, x, seed=7), cp)
    assert not torch.allclose(run_once(plain, x, seed=8)[0][-1], ref[0][-1])  # drop path is on
    units = 4 + sum(TINY['depths'])
    if frozen_stages == 0:
        assert counter.calls == units - (1 if reentrant and not x_grad else 0)
    else:  # the frozen (eval) stem, stage 0, downsampling 1 and stage 1 run plainly
        assert counter.calls == units - 5
        assert not any(p.requires_grad for m in (cp.downsample_layers[1], cp.stages[1])
                       for p in m.parameters())
        assert not cp.stages[1][0].training and cp.stages[2][0].training
        assert all(p.requires_grad for p in cp.norm0.parameters())  # mmcls: norms stay


@pytest.mark.filterwarnings('ignore:checkpoint mode .offload.')
@pytest.mark.parametrize('mode', ['full', 'selective', 'offload'])
def test_every_mode_equals_plain(mode):
    torch.manual_seed(0)
    plain = _tiny(drop_path_rate=0.2)
    model = copy.deepcopy(plain)
    plan = model.set_checkpoint_plan({'*': mode})
    assert set(plan.values()) == {mode} and model.with_cp
    x = torch.randn(3, 3, *SIZE, requires_grad=True)
    assert_same_run(run_once(plain, x, seed=5), run_once(model, x, seed=5), model)


def test_segments_and_per_stage_with_cp():
    torch.manual_seed(0)
    plain = _tiny(drop_path_rate=0.2, out_indices=(1, 3))
    model = copy.deepcopy(plain)
    model.set_checkpoint_segments([['downsample_layers.0', 'stages.1.0'],
                                   ['downsample_layers.2', 'stages.3.0']])
    x = torch.randn(3, 3, *SIZE, requires_grad=True)
    assert_same_run(run_once(plain, x, seed=5), run_once(model, x, seed=5), model)
    per_stage = ConvNeXt(arch=TINY, with_cp=(False, True, False, False)).checkpoint_plan()
    assert [n for n, m in per_stage.items() if m] == ['downsample_layers.1', 'stages.1.0']


def test_pretrained_mmcls_checkpoint_with_prefix(tmp_path):
    model = _tiny()
    path = str(tmp_path / 'convnext.pth')
    torch.save({'state_dict': {'backbone.' + k: v + 1 for k, v in model.state_dict().items()}},
               path)
    cfg = dict(type='mmcls.ConvNeXt', arch=TINY, out_indices=[0, 1, 2, 3],
               gap_before_final_norm=False,
               init_cfg=dict(type='Pretrained', checkpoint=path, prefix='backbone.'))
    loaded = build_model(cfg)
    loaded.init_weights()
    for k, v in model.state_dict().items():
        assert torch.equal(loaded.state_dict()[k], v + 1), k


def _timm_to_mmcls(state_dict):
    """timm ConvNeXt keys -> mmcls's (the mapping in convnext.py's docstring)."""
    out = {}
    for k, v in state_dict.items():
        if k.startswith('head.fc'):
            continue
        for pattern, repl in ((r'^stem\.', 'downsample_layers.0.'),
                              (r'^stages\.(\d+)\.downsample\.', r'downsample_layers.\1.'),
                              (r'^stages\.(\d+)\.blocks\.', r'stages.\1.'), (r'\.conv_dw\.',
                                                                             '.depthwise_conv.'),
                              (r'\.mlp\.fc1\.', '.pointwise_conv1.'),
                              (r'\.mlp\.fc2\.', '.pointwise_conv2.'), (r'^head\.norm\.', 'norm3.')):
            k = re.sub(pattern, repl, k)
        out[k] = v
    return out


def test_timm_convnext_gives_the_same_features():
    timm_convnext = pytest.importorskip('timm.models.convnext')
    torch.manual_seed(0)
    timm_model = timm_convnext.ConvNeXt(depths=TINY['depths'], dims=TINY['channels'],
                                        ls_init_value=1.0, num_classes=5).eval()
    model = ConvNeXt(arch=TINY, out_indices=(3, ), layer_scale_init_value=1.0).eval()
    model.load_state_dict(_timm_to_mmcls(timm_model.state_dict()), strict=True)
    x = torch.randn(2, 3, 64, 64)
    want = timm_model.forward_head(timm_model.forward_features(x), pre_logits=True)
    torch.testing.assert_close(model(x)[0], want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize('kwargs, match', [
    (dict(arch='huge'), "invalid arch 'huge' for ConvNeXt: allowed are tiny, small"),
    (dict(arch=dict(depths=[1, 1], channels=[8])), 'sequences of positive ints of one length'),
    (dict(arch=dict(depths=[1, 1])), 'needs exactly the keys channels, depths'),
    (dict(out_indices=4), 'out_indices'),
    (dict(out_indices=-5), 'out_indices'),
    (dict(frozen_stages=5), 'frozen_stages'),
    (dict(drop_path_rate=1.0), 'drop_path_rate'),
    (dict(norm_cfg=dict(type='LN3d')), "unknown norm type 'LN3d'"),
    (dict(init_cfg=dict(type='Kaiming')), 'init_cfg'),
    (dict(with_cp=(True, False)), 'with_cp'),
])
def test_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        ConvNeXt(**kwargs)
