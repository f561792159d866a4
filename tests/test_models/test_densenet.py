import pytest
import torch
import torch.utils.checkpoint as torch_cp
import torchvision

from ckptzoo.models.backbones import DenseNet
from ckptzoo.registry import build_model
from ckptzoo.memory.measure.trackers import saved_tensor_bytes

from tests.helpers.checkpointing import CountingCheckpoint, assert_same_run, one_thread, run_once

_one_thread = pytest.fixture(autouse=True)(one_thread)

TINY = dict(growth_rate=4, depths=(2, 3, 2), init_channels=8)


def _pair(**kwargs):
    torch.manual_seed(0)
    plain = DenseNet(arch=TINY, bn_size=2, out_indices=(0, 1, 2), **kwargs)
    # non-trivial BN affine parameters and running statistics
    for m in plain.modules():
        if isinstance(m, torch.nn.BatchNorm2d):
            torch.nn.init.normal_(m.weight, 1, 0.2)
            torch.nn.init.normal_(m.bias, 0, 0.2)
            m.running_mean.normal_(0, 0.1)
    state = plain.state_dict()
    return plain, state


@pytest.mark.filterwarnings('error')
@pytest.mark.parametrize('reentrant', [False, True])
@pytest.mark.parametrize('frozen_stages, x_grad', [(-1, True), (1, True), (1, False)])
def test_with_cp_equals_plain(monkeypatch, reentrant, frozen_stages, x_grad):
    plain, state = _pair(drop_rate=0.3, frozen_stages=frozen_stages)
    cp = DenseNet(arch=TINY, bn_size=2, out_indices=(0, 1, 2), drop_rate=0.3,
                  frozen_stages=frozen_stages, with_cp=True, cp_use_reentrant=reentrant)
    cp.load_state_dict(state)
    plain.train(), cp.train()
    x = torch.randn(2, 3, 32, 32).requires_grad_(x_grad)
    ref = run_once(plain, x, seed=7)
    counter = CountingCheckpoint()
    monkeypatch.setattr(torch_cp, 'checkpoint', counter)
    got = run_once(cp, x, seed=7)
    assert_same_run(ref, got, cp)
    layers = sum(TINY['depths'])
    if frozen_stages == -1:
        # every bottleneck, the stem, both transitions and the final norm
        assert counter.calls == layers + 1 + 2 + 1
    else:
        # frozen modules are in eval mode: the wrapper runs them plainly (stem, block 1's
        # layers, transition 1); without an input gradient, block 2's first layer has a
        # grad-free input, which only the non-reentrant implementation checkpoints
        frozen = 1 + TINY['depths'][0] + 1
        skipped = 1 if reentrant and not x_grad else 0
        assert counter.calls == layers + 4 - frozen - skipped
    # frozen parts stay frozen and in eval mode
    if frozen_stages == 1:
        assert not cp.features.conv0.weight.requires_grad
        assert not cp.features.transition1.norm.training
        assert cp.features.transition2.norm.training


@pytest.mark.filterwarnings('error')
def test_with_cp_per_block():
    plain, state = _pair()
    cp = DenseNet(arch=TINY, bn_size=2, out_indices=(0, 1, 2), with_cp=(False, True, False))
    cp.load_state_dict(state)
    assert [layer.with_cp for layer in cp.features.denseblock2.values()] == [True] * 3
    assert not cp.features.denseblock1.denselayer1.with_cp
    x = torch.randn(2, 3, 32, 32, requires_grad=True)
    assert_same_run(run_once(plain.train(), x, 3), run_once(cp.train(), x, 3), cp)


def test_checkpointed_bytes_densenet121():
    """with_cp keeps at most 0.45 of the bytes (torchvision memory_efficient: 0.474)."""
    x = torch.randn(2, 3, 224, 224)
    torch.manual_seed(0)
    plain = DenseNet('121').train()
    cp = DenseNet('121', with_cp=True).train()
    plain_bytes, _ = saved_tensor_bytes(plain, x)
    cp_bytes, _ = saved_tensor_bytes(cp, x)
    ratio = cp_bytes / plain_bytes
    print(f'densenet121 with_cp / plain saved bytes: {ratio:.4f}')
    assert ratio <= 0.45


def _randomise(model):
    gen = torch.Generator().manual_seed(5)
    for m in model.modules():
        if isinstance(m, torch.nn.BatchNorm2d):
            m.weight.data = 1 + 0.2 * torch.randn(m.weight.shape, generator=gen)
            m.bias.data = 0.2 * torch.randn(m.bias.shape, generator=gen)
            m.running_mean.copy_(0.1 * torch.randn(m.running_mean.shape, generator=gen))
            m.running_var.copy_(1 + 0.5 * torch.rand(m.running_var.shape, generator=gen))


def test_torchvision_state_dict_gives_same_features(tmp_path):
    torch.manual_seed(0)
    tv = torchvision.models.densenet121()
    _randomise(tv)
    tv.eval()
    model = DenseNet('121', out_indices=(0, 1, 2, 3)).eval()
    missing, unexpected = model.load_state_dict(tv.state_dict(), strict=False)
    assert missing == [] and unexpected == ['classifier.weight', 'classifier.bias']
    feats = {}
    for i in (1, 2, 3):
        getattr(tv.features, f'transition{i}').relu.register_forward_hook(
            lambda mod, inp, out, i=i: feats.__setitem__(i - 1, out.clone()))
    x = torch.randn(1, 3, 64, 64)
    with torch.no_grad():
        final = torch.relu(tv.features(x))
        outs = model(x)
    assert model.out_channels == (256, 512, 1024, 1024)
    assert [o.shape[1] for o in outs] == list(model.out_channels)
    assert [o.shape[-1] for o in outs] == [16, 8, 4, 2]  # strides 4, 8, 16, 32
    for i in range(3):
        torch.testing.assert_close(outs[i], feats[i], rtol=0, atol=1e-5)
    torch.testing.assert_close(outs[3], final, rtol=0, atol=1e-5)
    # and through init_cfg from a file
    path = tmp_path / 'densenet121.pth'
    torch.save(tv.state_dict(), path)
    built = build_model(dict(type='DenseNet', arch='121', out_indices=(3, ),
                             init_cfg=dict(type='Pretrained', checkpoint=str(path))))
    built.init_weights()
    with torch.no_grad():
        torch.testing.assert_close(built.eval()(x)[0], final, rtol=0, atol=1e-5)


def test_archs_and_out_channels():
    expected = {'169': (256, 512, 1280, 1664), '201': (256, 512, 1792, 1920),
                '161': (384, 768, 2112, 2208)}
    for arch, channels in expected.items():
        settings = DenseNet.arch_settings[arch]
        c, out = settings['init_channels'], []
        for i, d in enumerate(settings['depths']):
            c += d * settings['growth_rate']
            out.append(c)
            c //= 2
        assert tuple(out) == channels
    model = DenseNet(TINY, out_indices=(-1, 1))
    assert model.out_indices == (1, 2)
    assert model.out_channels == ((8 + 2 * 4) // 2 + 3 * 4, 20 // 2 + 2 * 4)
    outs = model(torch.randn(1, 3, 32, 32))
    assert [o.shape[1] for o in outs] == list(model.out_channels)


def test_bad_arguments():
    with pytest.raises(ValueError, match=r"invalid arch '122' for DenseNet: allowed are "
                                         r'121, 169, 201, 161'):
        DenseNet('122')
    with pytest.raises(ValueError, match=r'out_indices must be dense block indices in -3..2 '
                                         r'\(3 blocks\), got \(0, 3\)'):
        DenseNet(TINY, out_indices=(0, 3))
    with pytest.raises(ValueError, match=r'with_cp must be a bool or a tuple of 3 bools \(one '
                                         r'per dense block\), got \(True, False\)'):
        DenseNet(TINY, with_cp=(True, False))
    with pytest.raises(ValueError, match=r'frozen_stages must be an int in -1..3, got 4'):
        DenseNet(TINY, frozen_stages=4)
    with pytest.raises(ValueError, match=r'compression must be in \(0, 1\], got 0'):
        DenseNet(TINY, compression=0)
    with pytest.raises(ValueError, match=r"an arch dict needs exactly the keys.*got \['depths'\]"):
        DenseNet(dict(depths=(1, 2)))


def test_selective_dense_layer_keeps_only_its_conv_outputs():
    """A dense layer under 'selective' holds conv1's output and nothing else of its own
    (the concatenation and both BN-ReLU outputs are recomputed); 'full' also holds norm2's
    ReLU output, plain everything. Exact tensor bytes, outputs equal plain."""
    from ckptzoo.models.backbones.densenet import DenseLayer
    from ckptzoo.memory.measure.trackers import LiveTensorTracker
    torch.manual_seed(0)
    inputs = [torch.randn(2, 8, 32, 32, requires_grad=True) for _ in range(3)]
    mid = 2 * (4 * 4) * 32 * 32 * 4      # batch, bn_size * growth channels, float32
    cat = 2 * 24 * 32 * 32 * 4
    held, outs = {}, {}
    for mode in (None, 'full', 'selective'):
        torch.manual_seed(1)
        layer = DenseLayer(24, growth_rate=4, bn_size=4, drop_rate=0.0,
                           norm_cfg=dict(type='BN')).train()
        layer.cp_unit.mode = mode
        with LiveTensorTracker() as tracker:
            tracker.track(layer, inputs)
            outs[mode] = layer(inputs)
            held[mode] = tracker.live_bytes - tracker.baseline_bytes - outs[mode].nbytes
        outs[mode].sum().backward()
    small = 4096      # BN batch statistics, RNG states
    assert 2 * cat + 2 * mid <= held[None] <= 2 * cat + 2 * mid + small, held
    assert 2 * mid <= held['full'] <= 2 * mid + small, held
    assert mid <= held['selective'] <= mid + small, held
    torch.testing.assert_close(outs['selective'], outs[None], rtol=0, atol=1e-6)
