import copy

import pytest
import torch
import torch.utils.checkpoint as torch_cp

from ckptzoo.models.backbones import (PyramidVisionTransformer, PyramidVisionTransformerV2,
                                      pvt_convert)
from ckptzoo.registry import build_model

from tests.helpers.checkpointing import CountingCheckpoint, assert_same_run, one_thread, run_once

_one_thread = pytest.fixture(autouse=True)(one_thread)

# 4 channels per head; stage widths 4, 8, 8, 16
TINY = dict(embed_dims=4, num_layers=[1, 2, 1, 1], num_heads=[1, 2, 2, 4])
DROPS = dict(drop_rate=0.1, attn_drop_rate=0.1, drop_path_rate=0.2)
# 70 x 90 px: 17 x 22 tokens in stage 0 (v1 drops the remainder, v2's padded conv keeps it)
SIZE = (70, 90)

# mmdet 2.28.2's keys and shapes for TINY with num_layers=[1, 1, 1, 1] (read from a build of
# mmdet's PyramidVisionTransformer / V2), stages 0 and 3
MMDET_V1 = {
    'layers.0.0.projection.weight': (4, 3, 4, 4), 'layers.0.0.norm.weight': (4, ),
    'layers.0.1.0.pos_embed': (1, 3136, 4), 'layers.0.1.1.norm1.weight': (4, ),
    'layers.0.1.1.attn.attn.in_proj_weight': (12, 4), 'layers.0.1.1.attn.attn.in_proj_bias': (12, ),
    'layers.0.1.1.attn.attn.out_proj.weight': (4, 4), 'layers.0.1.1.attn.sr.weight': (4, 4, 8, 8),
    'layers.0.1.1.attn.norm.weight': (4, ), 'layers.0.1.1.norm2.bias': (4, ),
    'layers.0.1.1.ffn.layers.0.weight': (32, 4, 1, 1), 'layers.0.1.1.ffn.layers.3.weight':
    (4, 32, 1, 1), 'layers.3.0.projection.weight': (16, 8, 2, 2), 'layers.3.1.0.pos_embed':
    (1, 49, 16), 'layers.3.1.1.attn.attn.in_proj_weight': (48, 16),
    'layers.3.1.1.ffn.layers.3.bias': (16, )}
MMDET_V2 = {
    'layers.0.0.projection.weight': (4, 3, 7, 7), 'layers.0.1.0.attn.attn.in_proj_weight': (12, 4),
    'layers.0.1.0.attn.sr.weight': (4, 4, 8, 8), 'layers.0.1.0.ffn.layers.0.weight': (32, 4, 1, 1),
    'layers.0.1.0.ffn.layers.1.weight': (32, 1, 3, 3), 'layers.0.1.0.ffn.layers.4.weight':
    (4, 32, 1, 1), 'layers.0.2.weight': (4, ), 'layers.3.0.projection.weight': (16, 8, 3, 3),
    'layers.3.1.0.ffn.layers.1.weight': (64, 1, 3, 3), 'layers.3.2.bias': (16, )}


def _tiny(v2=False, **kwargs):
    cls = PyramidVisionTransformerV2 if v2 else PyramidVisionTransformer
    model = cls(**{**TINY, **kwargs})
    with torch.no_grad():  # non-trivial LayerNorms and biases
        for name, p in model.named_parameters():
            if 'norm' in name or name.endswith('bias'):
                p.add_(torch.randn_like(p) * 0.2)
    return model


@pytest.mark.parametrize('v2, mmdet_keys', [(False, MMDET_V1), (True, MMDET_V2)])
def test_keys_and_shapes_are_mmdets(v2, mmdet_keys):
    model = _tiny(v2, num_layers=[1, 1, 1, 1])
    shapes = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    assert {k: shapes[k] for k in mmdet_keys} == mmdet_keys
    assert len(shapes) == (92 if v2 else 80)  # as mmdet's
    assert ('layers.3.1.1.attn.sr.weight' in shapes) is False  # sr_ratio 1 in the last stage
    outs = model(torch.randn(1, 3, *SIZE))
    v1_sizes = [(17, 22), (8, 11), (4, 5), (2, 2)]
    v2_sizes = [(18, 23), (9, 12), (5, 6), (3, 3)]
    assert [tuple(o.shape) for o in outs] == [
        (1, c, *s) for c, s in zip((4, 8, 8, 16), v2_sizes if v2 else v1_sizes)]
    assert all(o.is_contiguous() for o in outs)
    assert model.out_channels == (4, 8, 8, 16)


def test_units_are_the_modules():
    model = _tiny(num_layers=[1, 2, 1, 1], out_indices=(1, 2))
    names = list(model.checkpoint_units())
    assert names[:8] == ['layers.0.0', 'layers.0.1.0', 'layers.0.1.1', 'layers.0.2',
                         'layers.1.0', 'layers.1.1.0', 'layers.1.1.1', 'layers.1.1.2']
    assert len(names) == 4 * 3 + 5 and all(model.get_submodule(n) is not None for n in names)
    # one chain up to stage 2's end (the last output); stage 3's units never run
    assert model.checkpoint_chains()[0][-1] == 'layers.2.2'
    assert model.checkpoint_chain_exits() == ['layers.1.2']
    assert [tuple(o.shape[:2]) for o in model(torch.randn(1, 3, 64, 64))] == [(1, 8), (1, 8)]


@pytest.mark.filterwarnings('error')
@pytest.mark.parametrize('v2', [False, True])
@pytest.mark.parametrize('reentrant', [False, True])
@pytest.mark.parametrize('frozen_stages, x_grad', [(-1, True), (-1, False), (1, True)])
def test_with_cp_equals_plain(monkeypatch, v2, reentrant, frozen_stages, x_grad):
    """Dropout, attention dropout and drop path on: the recompute replays the RNG."""
    dtype = torch.float64 if reentrant else torch.float32
    torch.manual_seed(0)
    plain = _tiny(v2, frozen_stages=frozen_stages, **DROPS).to(dtype)
    cp = _tiny(v2, frozen_stages=frozen_stages, with_cp=True, cp_use_reentrant=reentrant,
               **DROPS).to(dtype)
    cp.load_state_dict(plain.state_dict())
    assert cp.with_cp and not plain.with_cp
    x = torch.randn(3, 3, *SIZE, dtype=dtype).requires_grad_(x_grad)
    ref = run_once(plain, x, seed=11)
    counter = CountingCheckpoint()
    monkeypatch.setattr(torch_cp, 'checkpoint', counter)
    got = run_once(cp, x, seed=11)
    assert_same_run(ref, got, cp)
    assert not torch.allclose(run_once(plain, x, seed=12)[0][-1], ref[0][-1])  # drops are on
    units = len(cp.checkpoint_units())
    if frozen_stages == -1:
        # every unit, but the reentrant one skips the embedding when x needs no gradient
        assert counter.calls == units - (1 if reentrant and not x_grad else 0)
    else:
        assert counter.calls == units - len([n for n in cp.checkpoint_units()
                                             if n.startswith('layers.0.')])
        assert not any(p.requires_grad for p in cp.layers[0].parameters())
        assert all(p.requires_grad for p in cp.layers[1].parameters())


@pytest.mark.filterwarnings('ignore:checkpoint mode .offload.')
@pytest.mark.parametrize('mode', ['full', 'selective', 'offload'])
@pytest.mark.parametrize('v2', [False, True])
def test_every_mode_equals_plain(mode, v2):
    torch.manual_seed(0)
    plain = _tiny(v2, **DROPS)
    model = copy.deepcopy(plain)
    plan = model.set_checkpoint_plan({'*': mode})
    assert set(plan.values()) == {mode} and model.with_cp
    x = torch.randn(2, 3, *SIZE, requires_grad=True)
    assert_same_run(run_once(plain, x, seed=5), run_once(model, x, seed=5), model)


def test_segments_across_stages_equal_plain():
    torch.manual_seed(0)
    plain = _tiny(**DROPS, out_indices=(1, 3))
    model = copy.deepcopy(plain)
    model.set_checkpoint_segments([['layers.0.0', 'layers.1.2'], ['layers.2.1.0', 'layers.3.2']])
    x = torch.randn(2, 3, *SIZE, requires_grad=True)
    assert_same_run(run_once(plain, x, seed=5), run_once(model, x, seed=5), model)


def test_frozen_stages_and_eval():
    model = _tiny(frozen_stages=0).train()
    frozen = {n.split('.')[1] + '.' + n.split('.')[2] for n, p in model.named_parameters()
              if not p.requires_grad}
    assert frozen == {'0.0', '0.1'}  # the patch and position embeddings of stage 0
    assert model.layers[0][1][1].training and not model.layers[0][0].training
    model = _tiny(frozen_stages=2).train()
    assert all(not p.requires_grad for s in model.layers[:2] for p in s.parameters())
    assert all(p.requires_grad for p in model.layers[2].parameters())
    assert not model.layers[1][1][2].training and model.layers[2][1][0].training
    model = _tiny(**DROPS).eval()
    x = torch.randn(1, 3, 32, 32)
    torch.manual_seed(1)
    a = model(x)
    torch.manual_seed(2)
    assert all(torch.equal(p, q) for p, q in zip(a, model(x)))  # no drop in eval


def test_position_embedding_resized_as_mmdet():
    """The embedding is bilinearly resized to the token grid; at its own size it is kept."""
    model = PyramidVisionTransformer(**TINY, pretrain_img_size=(64, 96))
    pos = model.layers[0][1][0]
    assert pos.pos_shape == (16, 24)
    grid = pos.pos_embed.reshape(1, 16, 24, 4).permute(0, 3, 1, 2)
    resized = pos.resize_pos_embed(pos.pos_embed, (8, 12))
    want = torch.nn.functional.interpolate(grid, size=(8, 12), mode='bilinear')
    torch.testing.assert_close(resized, want.flatten(2).transpose(1, 2), rtol=0, atol=0)
    assert torch.equal(pos.resize_pos_embed(pos.pos_embed, (16, 24)), pos.pos_embed)


def _official(model):
    """An official-release-style (PVTv1) state dict with ``model``'s shapes."""
    out = {'norm.weight': torch.ones(16), 'head.weight': torch.ones(5, 16),
           'cls_token': torch.ones(1, 1, 16)}
    for k, v in model.state_dict().items():
        parts = k.split('.')
        s = int(parts[1]) + 1
        if parts[2] == '0':
            out[f'patch_embed{s}.' + '.'.join(parts[3:]).replace('projection.', 'proj.')] = v + 1
        elif parts[2] == '1' and parts[4] == 'pos_embed':
            out[f'pos_embed{s}'] = torch.cat([torch.zeros(1, 1, v.shape[2]), v + 1], 1) \
                if s == 4 else v + 1
        elif parts[2] == '1':
            j, rest = int(parts[3]) - 1, '.'.join(parts[4:])
            if 'in_proj_' in rest:
                q, kv = (v + 1).split([v.shape[0] // 3, 2 * v.shape[0] // 3])
                param = rest.rsplit('_', 1)[1]  # weight / bias
                out[f'block{s}.{j}.attn.q.{param}'] = q
                out[f'block{s}.{j}.attn.kv.{param}'] = kv
                continue
            rest = rest.replace('attn.attn.out_proj.', 'attn.proj.')
            rest = rest.replace('ffn.layers.0.', 'mlp.fc1.').replace('ffn.layers.3.', 'mlp.fc2.')
            out[f'block{s}.{j}.{rest}'] = (v + 1).squeeze(-1).squeeze(-1) \
                if rest.startswith('mlp.') else v + 1
    return out


def test_convert_weights_reads_the_official_release(tmp_path):
    model = PyramidVisionTransformer(**TINY)  # 224: 7 x 7 in stage 3
    official = _official(model)
    converted = pvt_convert(official)
    assert set(converted) == set(model.state_dict())
    for k, v in model.state_dict().items():
        torch.testing.assert_close(converted[k], v + 1, rtol=0, atol=0, msg=k)
    path = str(tmp_path / 'pvt_tiny.pth')
    torch.save(official, path)
    # mmdet's configs write init_cfg=dict(checkpoint=URL) without a type
    loaded = PyramidVisionTransformer(**TINY, init_cfg=dict(checkpoint=path))
    loaded.init_weights()
    for k, v in model.state_dict().items():
        torch.testing.assert_close(loaded.state_dict()[k], v + 1, rtol=0, atol=0, msg=k)
    mmdet_format = PyramidVisionTransformer(**TINY, convert_weights=False,
                                            init_cfg=dict(type='Pretrained', checkpoint=path))
    torch.save(model.state_dict(), path)
    mmdet_format.init_weights()
    assert all(torch.equal(mmdet_format.state_dict()[k], v) for k, v in model.state_dict().items())


def test_built_from_config_names():
    model = build_model(dict(type='PyramidVisionTransformerV2', embed_dims=4,
                             num_layers=[1, 1, 1, 1], out_indices=(0, 3)))
    assert isinstance(model, PyramidVisionTransformerV2) and model.out_channels == (4, 32)
    assert [tuple(o.shape) for o in model(torch.randn(1, 3, 32, 32))] == [(1, 4, 8, 8),
                                                                           (1, 32, 1, 1)]


@pytest.mark.parametrize('cls, kwargs, error, match', [
    (PyramidVisionTransformer, dict(num_heads=[1, 2, 5]), ValueError,
     'num_heads must be a sequence of num_stages=4'),
    (PyramidVisionTransformer, dict(sr_ratios=[8, 4, 0, 1]), ValueError, 'sr_ratios must hold'),
    (PyramidVisionTransformer, dict(out_indices=(4, )), ValueError, 'out_indices'),
    (PyramidVisionTransformer, dict(frozen_stages=5), ValueError, 'frozen_stages'),
    (PyramidVisionTransformer, dict(drop_path_rate=1.0), ValueError, 'drop_path_rate'),
    (PyramidVisionTransformer, dict(norm_cfg=dict(type='BN')), ValueError, "type='LN'"),
    (PyramidVisionTransformer, dict(pretrain_img_size=(1, 2, 3)), ValueError,
     'pretrain_img_size'),
    (PyramidVisionTransformer, dict(pretrain_img_size=16), ValueError,
     'pretrain_img_size .* gives stage 3 no position embedding'),
    (PyramidVisionTransformer, dict(init_cfg=dict(type='Kaiming')), ValueError, 'init_cfg'),
    (PyramidVisionTransformer, dict(pretrained='a.pth', init_cfg=dict(checkpoint='b')),
     ValueError, 'not both'),
    (PyramidVisionTransformer, dict(with_cp=(True, False)), ValueError, 'with_cp'),
    (PyramidVisionTransformer, dict(embed_dims=0), ValueError, 'embed_dims must be a positive'),
    (PyramidVisionTransformer, dict(pretrained=3), TypeError, 'pretrained must be a str'),
    (PyramidVisionTransformerV2, dict(patch_sizes=[4, 2, 2, 2]), TypeError,
     'PyramidVisionTransformerV2 fixes patch_sizes'),
])
def test_bad_arguments(cls, kwargs, error, match):
    with pytest.raises(error, match=match):
        cls(**kwargs)


def test_pretrained_becomes_init_cfg():
    with pytest.warns(DeprecationWarning):
        model = PyramidVisionTransformerV2(**TINY, pretrained='pvt_v2_b0.pth')
    assert model.init_cfg == dict(type='Pretrained', checkpoint='pvt_v2_b0.pth')
    assert model.convert_weights is True  # mmdet's default: the official release's keys
