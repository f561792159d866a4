import pytest
import torch
import torch.nn.functional as F
import torch.utils.checkpoint as torch_cp
import torchvision

from ckptzoo.models.backbones import SwinTransformer, convert_torchvision_swin
from ckptzoo.models.utils.drop import DropPath
from ckptzoo.registry import build_model
from ckptzoo.memory.measure.trackers import saved_tensor_bytes

from tests.helpers.checkpointing import CountingCheckpoint, assert_same_run, one_thread, run_once

_one_thread = pytest.fixture(autouse=True)(one_thread)

TINY = dict(embed_dims=8, depths=(2, 2, 2), num_heads=(1, 2, 4))
# 42 x 58 px: padded to 44 x 60 by the patch embedding (11 x 15 tokens), then to whole
# 4 x 4 windows (12 x 16) in stage 0, 6 x 8 in stage 1, 3 x 4 -> 4 x 4 (no shift) in stage 2
SIZE = (42, 58)
DROPS = dict(drop_rate=0.1, attn_drop_rate=0.1, drop_path_rate=0.3)


def _tiny(**kwargs):
    return SwinTransformer(arch=TINY, window_size=4, out_indices=(0, 1, 2), **kwargs)


@pytest.mark.filterwarnings('error')
@pytest.mark.parametrize('reentrant', [False, True])
@pytest.mark.parametrize('frozen_stages, x_grad', [(-1, True), (-1, False), (1, True),
                                                   (1, False)])
def test_with_cp_equals_plain(monkeypatch, reentrant, frozen_stages, x_grad):
    torch.manual_seed(0)
    plain = _tiny(frozen_stages=frozen_stages, **DROPS)
    for m in plain.modules():  # non-trivial LayerNorms
        if isinstance(m, torch.nn.LayerNorm):
            torch.nn.init.normal_(m.weight, 1, 0.2)
            torch.nn.init.normal_(m.bias, 0, 0.2)
    cp = _tiny(frozen_stages=frozen_stages, with_cp=True, cp_use_reentrant=reentrant, **DROPS)
    cp.load_state_dict(plain.state_dict())
    plain.train(), cp.train()
    x = torch.randn(2, 3, *SIZE).requires_grad_(x_grad)
    ref = run_once(plain, x, seed=16)
    counter = CountingCheckpoint()
    monkeypatch.setattr(torch_cp, 'checkpoint', counter)
    got = run_once(cp, x, seed=16)
    assert_same_run(ref, got, cp)
    # different seeds give different outputs: dropout and drop path are really on
    other = run_once(plain, x, seed=26)
    assert not torch.allclose(other[0][-1], ref[0][-1])
    blocks, merges = sum(TINY['depths']), 2
    if frozen_stages == -1:
        # every block, both patch mergings and the patch embedding (unless the reentrant
        # implementation sees no input gradient: it would lose the embedding's gradients)
        assert counter.calls == blocks + merges + 1 - (1 if reentrant and not x_grad else 0)
    else:
        # frozen (eval) parts run plainly: the embedding, stage 0's blocks and merging;
        # without an input gradient, stage 1's first block gets a grad-free input, which
        # the reentrant implementation does not checkpoint
        assert counter.calls == blocks + merges + 1 - 4 - (1 if reentrant and not x_grad else 0)
        assert not cp.patch_embed.projection.weight.requires_grad
        assert not cp.stages[0].downsample.reduction.weight.requires_grad
        assert not cp.norm0.weight.requires_grad and cp.norm1.weight.requires_grad


def test_checkpointed_bytes_swin_tiny():
    """with_cp keeps at most 0.09 of the bytes (timm's set_grad_checkpointing: 0.093)."""
    x = torch.randn(2, 3, 224, 224)
    torch.manual_seed(0)
    plain = SwinTransformer('tiny').train()
    cp = SwinTransformer('tiny', with_cp=True).train()
    plain_bytes, _ = saved_tensor_bytes(plain, x)
    cp_bytes, _ = saved_tensor_bytes(cp, x)
    ratio = cp_bytes / plain_bytes
    print(f'swin tiny with_cp / plain saved bytes: {ratio:.4f}')
    assert ratio <= 0.09


def _torchvision_features(tv, x):
    feats, y = [], x
    for i, layer in enumerate(tv.features):
        y = layer(y)
        if i % 2 == 1:
            feats.append(y)
    feats[-1] = tv.norm(feats[-1])
    return [f.permute(0, 3, 1, 2) for f in feats]  # NHWC -> NCHW


@pytest.fixture(scope='module')
def swin_t():
    torch.manual_seed(0)
    tv = torchvision.models.swin_t()  # stochastic_depth_prob=0.2
    gen = torch.Generator().manual_seed(3)
    for m in tv.modules():
        if isinstance(m, torch.nn.LayerNorm):
            m.weight.data = 1 + 0.2 * torch.randn(m.weight.shape, generator=gen)
            m.bias.data = 0.2 * torch.randn(m.bias.shape, generator=gen)
    return tv


def test_torchvision_swin_t_gives_same_features(swin_t, tmp_path):
    model = SwinTransformer('tiny', drop_path_rate=0.2, convert_weights='torchvision')
    missing, unexpected = model.load_state_dict(convert_torchvision_swin(swin_t.state_dict()),
                                                strict=False)
    # torchvision has one final norm (-> norm3); the other outputs' norms are ours
    assert sorted(missing) == [f'norm{i}.{p}' for i in range(3) for p in ('bias', 'weight')]
    assert unexpected == []
    for i in range(3):
        getattr(model, f'norm{i}').weight.data.normal_(1, 0.2)
    assert model.out_channels == (96, 192, 384, 768)
    # 64 x 96 px: every stage is padded to whole 7 x 7 windows; the last two are not shifted
    x = torch.randn(2, 3, 64, 96)
    with torch.no_grad():
        swin_t.eval(), model.eval()
        ref = _torchvision_features(swin_t, x)
        outs = model(x)
        for i, (o, r) in enumerate(zip(outs, ref)):
            if i < 3:
                norm = getattr(model, f'norm{i}')
                r = F.layer_norm(r.permute(0, 2, 3, 1), r.shape[1:2], norm.weight,
                                 norm.bias).permute(0, 3, 1, 2)
            assert o.shape == r.shape == (2, model.out_channels[i], 16 >> i, 24 >> i)
            torch.testing.assert_close(o, r, rtol=0, atol=1e-5)
        # train mode: the same drop path draws (same linear schedule, same RNG order)
        swin_t.train(), model.train()
        torch.manual_seed(5)
        ref_t = swin_t.norm(swin_t.features(x)).permute(0, 3, 1, 2)
        torch.manual_seed(5)
        out_t = model(x)[3]
        torch.testing.assert_close(out_t, ref_t, rtol=0, atol=1e-5)
        assert not torch.allclose(out_t, outs[3], atol=1e-3)
    # and from a file through init_cfg with convert_weights
    path = tmp_path / 'swin_t.pth'
    torch.save(swin_t.state_dict(), path)
    built = build_model(dict(type='SwinTransformer', arch='tiny', out_indices=(3, ),
                             convert_weights='torchvision',
                             init_cfg=dict(type='Pretrained', checkpoint=str(path))))
    built.init_weights()
    with torch.no_grad():
        torch.testing.assert_close(built.eval()(x)[0], outs[3], rtol=0, atol=1e-5)


def test_mmdet_style_arguments_and_shapes():
    model = build_model(dict(type='SwinTransformer', embed_dims=8, depths=[2, 2, 2, 2],
                             num_heads=[1, 2, 4, 8], window_size=3, qk_scale=None,
                             out_indices=(1, 2, 3), drop_path_rate=0.2))
    assert model.out_channels == (16, 32, 64) and model.feat_dim == 64
    outs = model(torch.randn(1, 3, 50, 70))
    assert [tuple(o.shape) for o in outs] == [(1, 16, 7, 9), (1, 32, 4, 5), (1, 64, 2, 3)]
    rates = [b.drop_path.drop_prob for s in model.stages for b in s.blocks]
    torch.testing.assert_close(torch.tensor(rates), torch.linspace(0, 0.2, 8))


def test_bad_arguments():
    with pytest.raises(ValueError, match=r"invalid arch 'huge' for SwinTransformer: allowed "
                                         r'are tiny, small, base, large'):
        SwinTransformer('huge')
    with pytest.raises(ValueError, match='window_size must be a positive int, got 0'):
        SwinTransformer(TINY, window_size=0)
    with pytest.raises(ValueError, match=r'patch_size must be a positive int, got 2.5'):
        SwinTransformer(TINY, patch_size=2.5)
    with pytest.raises(ValueError, match=r'out_indices must be stage indices in 0..2 '
                                         r'\(3 stages\), got \(1, 3\)'):
        SwinTransformer(TINY, out_indices=(1, 3))
    with pytest.raises(ValueError, match=r'with_cp must be a bool or a tuple of 3 bools \(one '
                                         r'per stage\), got \(True,\)'):
        SwinTransformer(TINY, out_indices=(2, ), with_cp=(True, ))
    with pytest.raises(ValueError, match=r'num_heads\[1\]=3 must divide the stage width 16'):
        SwinTransformer(dict(TINY, num_heads=(1, 3, 4)), out_indices=(2, ))
    with pytest.raises(ValueError, match='a Swin V2 state dict'):
        convert_torchvision_swin({'features.1.0.attn.logit_scale': torch.zeros(1)})


def _tiny_torchvision_swin(window=4):
    from torchvision.models.swin_transformer import SwinTransformer as TVSwin
    torch.manual_seed(0)
    tv = TVSwin(patch_size=[4, 4], embed_dim=8, depths=[2, 2], num_heads=[1, 2],
                window_size=[window, window], stochastic_depth_prob=0.0)
    for m in tv.modules():
        if isinstance(m, torch.nn.LayerNorm):
            torch.nn.init.normal_(m.weight, 1, 0.2), torch.nn.init.normal_(m.bias, 0, 0.2)
    return tv


def _official_keys(tv_state):
    """torchvision's Swin in the official release's keys (the two differ only in names)."""
    out = {}
    for k, v in tv_state.items():
        parts = k.split('.')
        if k.startswith('features.0.'):
            k = {'0': 'patch_embed.proj.', '2': 'patch_embed.norm.'}[parts[2]] + parts[3]
        elif k.startswith('features.'):
            idx = int(parts[1])
            rest = '.'.join(parts[2:]).replace('mlp.0.', 'mlp.fc1.').replace('mlp.3.', 'mlp.fc2.')
            k = (f'layers.{(idx - 1) // 2}.blocks.{rest}' if idx % 2 else
                 f'layers.{idx // 2 - 1}.downsample.{rest}')
        out[k] = v
    out['layers.0.blocks.1.attn_mask'] = torch.zeros(4, 16, 16)  # a derived buffer
    return out


def test_convert_weights_true_reads_the_official_swin_format(tmp_path):
    tv = _tiny_torchvision_swin()
    official, tv_file = tmp_path / 'official.pth', tmp_path / 'tv.pth'
    torch.save(dict(model=_official_keys(tv.state_dict())), official)
    torch.save(tv.state_dict(), tv_file)
    arch = dict(embed_dims=8, depths=(2, 2), num_heads=(1, 2))
    models = {}
    for convert, path in ((True, official), ('torchvision', tv_file)):
        models[convert] = build_model(dict(
            type='SwinTransformer', arch=arch, window_size=4, out_indices=(0, 1),
            convert_weights=convert, init_cfg=dict(type='Pretrained', checkpoint=str(path))))
    with pytest.warns(UserWarning, match=r"keys missing from .*official.pth: \['norm0.weight', "
                      r"'norm0.bias', 'norm1.weight', 'norm1.bias'\]"):
        models[True].init_weights()  # the final norm is the classifier's: mmdet skips it too
    with pytest.warns(UserWarning, match=r"keys missing from .*tv.pth: \['norm0.weight'"):
        models['torchvision'].init_weights()  # torchvision's final norm -> norm1
    ours, ref = models[True].state_dict(), models['torchvision'].state_dict()
    for k, v in ref.items():
        if not k.startswith('norm'):
            torch.testing.assert_close(ours[k], v, rtol=0, atol=0, msg=k)
    models[True].norm1.load_state_dict(models['torchvision'].norm1.state_dict())
    x = torch.randn(1, 3, 64, 80)  # every map larger than a window: both shift alike
    with torch.no_grad():
        out = models[True].eval()(x)[1]
        expected = tv.eval().norm(tv.features(x)).permute(0, 3, 1, 2)
    torch.testing.assert_close(out, expected, rtol=0, atol=1e-5)
    with pytest.raises(ValueError, match="not an official Swin state dict.*convert_weights="
                       "'torchvision'"):
        models[True].init_cfg = dict(type='Pretrained', checkpoint=str(tv_file))
        models[True].init_weights()
    with pytest.raises(ValueError, match="convert_weights must be False, True .* got 'tv'"):
        SwinTransformer(arch, out_indices=(1, ), convert_weights='tv')


def test_official_bias_tables_of_another_window_are_resized(tmp_path):
    tv = _tiny_torchvision_swin(window=4)
    path = tmp_path / 'official.pth'
    torch.save(dict(model=_official_keys(tv.state_dict())), path)
    model = SwinTransformer(dict(embed_dims=8, depths=(2, 2), num_heads=(1, 2)), window_size=6,
                            out_indices=(1, ), convert_weights=True,
                            init_cfg=dict(type='Pretrained', checkpoint=str(path)))
    with pytest.warns(UserWarning, match='keys missing'):
        model.init_weights()
    table = tv.features[1][0].attn.relative_position_bias_table  # 7 x 7 positions, 1 head
    expected = F.interpolate(table.detach().t().reshape(1, 1, 7, 7), size=(11, 11),
                             mode='bicubic').reshape(1, 121).t()
    torch.testing.assert_close(
        model.stages[0].blocks[0].attn.w_msa.relative_position_bias_table.detach(), expected,
        rtol=0, atol=0)


def test_mmdet_swin_checkpoint_loads_strictly(tmp_path):
    """The keys of mmdet 2.x's SwinTransformer (relative_position_index buffers included)."""
    model = SwinTransformer(dict(embed_dims=8, depths=(1, 1), num_heads=(1, 2)),
                            window_size=4, out_indices=(0, 1))
    block = ['norm1.weight', 'norm1.bias', 'attn.w_msa.relative_position_bias_table',
             'attn.w_msa.relative_position_index', 'attn.w_msa.qkv.weight',
             'attn.w_msa.qkv.bias', 'attn.w_msa.proj.weight', 'attn.w_msa.proj.bias',
             'norm2.weight', 'norm2.bias', 'ffn.layers.0.0.weight', 'ffn.layers.0.0.bias',
             'ffn.layers.1.weight', 'ffn.layers.1.bias']
    mmdet_keys = (['patch_embed.projection.weight', 'patch_embed.projection.bias',
                   'patch_embed.norm.weight', 'patch_embed.norm.bias']
                  + [f'stages.0.blocks.0.{k}' for k in block]
                  + ['stages.0.downsample.norm.weight', 'stages.0.downsample.norm.bias',
                     'stages.0.downsample.reduction.weight']
                  + [f'stages.1.blocks.0.{k}' for k in block]
                  + ['norm0.weight', 'norm0.bias', 'norm1.weight', 'norm1.bias'])
    assert list(model.state_dict()) == mmdet_keys
    other = SwinTransformer(dict(embed_dims=8, depths=(1, 1), num_heads=(1, 2)),
                            window_size=4, out_indices=(0, 1))
    detector = {f'backbone.{k}': v for k, v in other.state_dict().items()}
    detector['neck.lateral_convs.0.conv.weight'] = torch.zeros(1)
    path = tmp_path / 'retinanet_swin.pth'
    torch.save(dict(meta=dict(mmdet_version='2.28.2'), state_dict=detector), path)
    from ckptzoo.runner.checkpoint import load_checkpoint
    load_checkpoint(model, str(path), strict=True, prefix='backbone')
    for k, v in other.state_dict().items():
        torch.testing.assert_close(model.state_dict()[k], v, rtol=0, atol=0)


def test_mmdet_semantics_unless_torchvision():
    """mmdet's Swin shifts every other block's windows even where one window covers the
    padded map, and draws drop path as mmcv's DropPath (``floor(keep + rand)`` per sample);
    torchvision's semantics only with ``convert_weights='torchvision'``."""
    kw = dict(embed_dims=8, depths=[2, 2], num_heads=[1, 2], window_size=4, out_indices=(0, 1))
    mm = SwinTransformer(**kw, drop_path_rate=0.0).eval()
    tv = SwinTransformer(**kw, drop_path_rate=0.0, convert_weights='torchvision').eval()
    tv.load_state_dict(mm.state_dict())
    x = torch.randn(2, 3, 32, 32)  # stage 0: 8 x 8 (two windows a side), stage 1: 4 x 4 (one)
    with torch.no_grad():
        (a0, a1), (b0, b1) = mm(x), tv(x)
    torch.testing.assert_close(a0, b0, rtol=0, atol=0)
    assert (a1 - b1).abs().max() > 1e-3  # the second block of stage 1 shifts in mmdet's only
    block = mm.stages[1].blocks[1]
    assert isinstance(block.drop_path, DropPath) and not isinstance(
        tv.stages[1].blocks[1].drop_path, DropPath)
    drop = DropPath(0.5).train()
    y = torch.ones(6, 2, 2, 3)
    torch.manual_seed(3)
    out = drop(y)
    torch.manual_seed(3)
    keep = (0.5 + torch.rand(6, 1, 1, 1)).floor()
    torch.testing.assert_close(out, y / 0.5 * keep, rtol=0, atol=0)
