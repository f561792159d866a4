"""PanopticFPNHead (and BaseSemanticHead): mmdet 2.x keys and shapes, the things-as-one-class
relabelling and loss, each input level a checkpoint unit with every mode exact, the chunked
test-time arg-max equal to the full one, bad arguments."""
import warnings

import pytest
import torch
import torch.nn.functional as F

from ckptzoo.models.checkpointing import MODES
from ckptzoo.models.seg_heads import BaseSemanticHead, PanopticFPNHead
from ckptzoo.registry import build_head
from tests.helpers.checkpointing import one_thread as _one_thread

one_thread = pytest.fixture(autouse=True)(_one_thread)


def _head(**kw):
    cfg = dict(type='PanopticFPNHead', num_things_classes=3, num_stuff_classes=2, in_channels=8,
               inner_channels=8, norm_cfg=dict(type='GN', num_groups=4, requires_grad=True),
               loss_seg=dict(type='CrossEntropyLoss', ignore_index=255, loss_weight=0.5))
    cfg.update(kw)
    torch.manual_seed(0)
    return build_head(cfg)


def _feats(n=2, size=16, channels=8, levels=5, seed=1):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(n, channels, size // 2**i, size // 2**i, generator=g)
            for i in range(levels)]


def test_mmdet_keys_and_shapes_of_the_r50_config():
    """The R50 config's head (80 things, 53 stuff, 256 -> 128, GN 32) has mmdet's 23 keys."""
    head = build_head(dict(type='PanopticFPNHead', num_things_classes=80, num_stuff_classes=53,
                           in_channels=256, inner_channels=128, start_level=0, end_level=4,
                           norm_cfg=dict(type='GN', num_groups=32, requires_grad=True),
                           conv_cfg=None, loss_seg=dict(type='CrossEntropyLoss',
                                                        ignore_index=255, loss_weight=0.5)))
    shapes = {k: tuple(v.shape) for k, v in head.state_dict().items()}
    expected = {}
    for level in range(4):
        for j in range(max(level, 1)):
            prefix = f'conv_upsample_layers.{level}.conv.{j}.'
            expected[prefix + 'conv.weight'] = (128, 256 if j == 0 else 128, 3, 3)
            expected[prefix + 'gn.weight'] = expected[prefix + 'gn.bias'] = (128, )
    expected['conv_logits.weight'] = (54, 128, 1, 1)
    expected['conv_logits.bias'] = (54, )
    assert shapes == expected and len(shapes) == 23
    assert head.num_classes == 54 and isinstance(head, BaseSemanticHead)
    assert head.conv_logits.bias.abs().sum() == 0
    assert 0.005 < head.conv_logits.weight.std() < 0.015


def test_forward_shapes_and_upsampling_per_level():
    head = _head()
    out = head(_feats())
    assert out['seg_preds'].shape == (2, 3, 16, 16) and out['feats'].shape == (2, 8, 16, 16)
    assert [len(layer.conv) for layer in head.conv_upsample_layers] == [1, 1, 2, 3]
    assert [layer.num_upsample for layer in head.conv_upsample_layers] == [0, 1, 2, 3]
    # a later start level: level 1's stack upsamples once, to level 0's size
    head = _head(start_level=1, end_level=3)
    assert head(_feats())['seg_preds'].shape == (2, 3, 16, 16)
    assert list(head.checkpoint_units()) == ['level1', 'level2']


def test_things_become_one_class_and_stuff_starts_at_zero():
    head = _head()
    gt = torch.tensor([[0, 1, 2, 3, 4, 255]])
    assert head._set_things_to_void(gt).tolist() == [[2, 2, 2, 0, 1, 255]]


def test_loss_is_cross_entropy_over_relabelled_pixels_resized_to_the_labels():
    head = _head()
    x = _feats()
    gt = torch.randint(0, 5, (2, 1, 32, 32))
    gt[:, :, :4] = 255
    loss = head.forward_train(x, gt)
    assert list(loss) == ['loss_seg']
    logits = F.interpolate(head(x)['seg_preds'], size=(32, 32), mode='bilinear',
                           align_corners=False)
    target = head._set_things_to_void(gt)[:, 0].long()
    # mmdet's CrossEntropyLoss (avg_non_ignore=False): the mean over every pixel, ignored
    # ones included
    expected = 0.5 * F.cross_entropy(logits, target, ignore_index=255,
                                     reduction='sum') / target.numel()
    torch.testing.assert_close(loss['loss_seg'], expected, rtol=1e-6, atol=1e-7)
    with pytest.raises(ValueError, match='gt_semantic_seg'):
        head.forward_train(x, None)


@pytest.mark.filterwarnings('ignore:checkpoint mode .offload.')
@pytest.mark.parametrize('mode', [m for m in MODES if m])
def test_every_checkpoint_mode_is_exact(mode):
    """Each level's ConvUpsample is a unit: outputs and every gradient equal the plain run."""
    head = _head()
    assert list(head.checkpoint_units()) == ['level0', 'level1', 'level2', 'level3']

    def run():
        head.zero_grad(set_to_none=True)
        x = [f.clone().requires_grad_() for f in _feats()]
        out = head(x)
        gt = torch.randint(0, 5, (2, 1, 16, 16), generator=torch.Generator().manual_seed(0))
        (head.loss(out['seg_preds'], gt)['loss_seg'] + out['feats'].square().mean()).backward()
        return out['seg_preds'].detach(), [f.grad for f in x], \
            {n: p.grad.clone() for n, p in head.named_parameters()}

    ref = run()
    head.set_checkpoint_plan({'*': mode})
    got = run()
    torch.testing.assert_close(got[0], ref[0], rtol=0, atol=0)
    for a, b in zip(got[1], ref[1]):
        if b is None:
            assert a is None
        else:
            torch.testing.assert_close(a, b, rtol=0, atol=1e-7)
    assert got[2].keys() == ref[2].keys()
    for name, grad in ref[2].items():
        assert grad.abs().sum() > 0, name
        torch.testing.assert_close(got[2][name], grad, rtol=0, atol=1e-7)


def test_with_cp_checkpoints_every_level():
    assert set(_head(with_cp=True).checkpoint_plan().values()) == {'full'}
    assert set(_head().checkpoint_plan().values()) == {None}


def _metas(rescale_shape=(25, 23, 3)):
    return [dict(pad_shape=(16, 16, 3), img_shape=(14, 13, 3), ori_shape=rescale_shape,
                 batch_input_shape=(16, 16)),
            dict(pad_shape=(16, 16, 3), img_shape=(16, 12, 3), ori_shape=(8, 6, 3),
                 batch_input_shape=(16, 16))]


@pytest.mark.parametrize('rescale', [False, True])
def test_simple_test_upsamples_each_image_to_its_shapes(rescale):
    head = _head()
    x = _feats()
    metas = _metas()
    with torch.no_grad():
        logits = head.simple_test(x, metas, rescale=rescale)
        raw = head(x)['seg_preds']
    for i, meta in enumerate(metas):
        up = F.interpolate(raw[i:i + 1], size=(16, 16), mode='bilinear', align_corners=False)
        if rescale:
            h, w = meta['img_shape'][:2]
            up = F.interpolate(up[:, :, :h, :w], size=meta['ori_shape'][:2], mode='bilinear',
                               align_corners=False)
        torch.testing.assert_close(logits[i], up[0], rtol=0, atol=0)


@pytest.mark.parametrize('rescale', [False, True])
@pytest.mark.parametrize('limit', [1, 16 * 16 * 4 * 2 + 1, 2**30])
def test_chunked_labels_equal_the_argmax_of_the_full_logits(rescale, limit):
    """However small the memory limit (1 byte: one channel at a time), the labels equal the
    arg-max of every channel upsampled at once; ties go to the lower channel."""
    head = _head(num_stuff_classes=6)
    head.upsample_mem_limit = limit
    x = _feats()
    metas = _metas()
    with torch.no_grad():
        labels = head.simple_test_labels(x, metas, rescale=rescale)
        logits = head.simple_test(x, metas, rescale=rescale)
    for lab, logit in zip(labels, logits):
        assert lab.dtype == torch.int64
        assert torch.equal(lab, logit.argmax(dim=0))
    # ties: equal logits in every channel give channel 0
    head.conv_logits.weight.data.zero_()
    head.conv_logits.bias.data.zero_()
    with torch.no_grad():
        assert all((lab == 0).all() for lab in head.simple_test_labels(x, metas, rescale))


def test_deprecated_arguments():
    with pytest.warns(UserWarning, match='num_classes'):
        assert _head(num_classes=3).num_classes == 3
    with pytest.raises(ValueError, match='num_stuff_classes \\+ 1'):
        with warnings.catch_warnings():
            warnings.simplefilter('ignore')
            _head(num_classes=5)
    with pytest.warns(UserWarning, match='fg_range'):
        head = _head(fg_range=(0, 9), bg_range=(10, 12))
    assert (head.num_things_classes, head.num_stuff_classes) == (10, 3)


@pytest.mark.parametrize('kw, match', [
    (dict(end_level=0), 'end_level'), (dict(start_level=-1), 'start_level'),
    (dict(num_stuff_classes=1.5), 'num_stuff_classes'), (dict(with_cp='yes'), 'with_cp'),
    (dict(inner_channels=0), 'inner_channels')])
def test_bad_arguments_are_refused_by_name(kw, match):
    with pytest.raises((TypeError, ValueError), match=match):
        _head(**kw)


def test_too_few_levels_are_refused():
    with pytest.raises(ValueError, match='levels'):
        _head()(_feats(levels=3))


def test_base_head_is_abstract():
    with pytest.raises(NotImplementedError):
        BaseSemanticHead(3)([torch.zeros(1)])
    assert issubclass(PanopticFPNHead, BaseSemanticHead)


def test_reentrant_full_checkpoint_is_exact():
    plain, reentrant = _head(), _head(with_cp=True, cp_use_reentrant=True)
    reentrant.load_state_dict(plain.state_dict())
    grads = []
    for head in (plain, reentrant):
        x = [f.requires_grad_() for f in _feats()]
        head(x)['seg_preds'].square().sum().backward()
        grads.append([p.grad for p in head.parameters()] + [f.grad for f in x[:4]])
    for a, b in zip(*grads):
        torch.testing.assert_close(b, a, rtol=0, atol=1e-7)


def test_the_labels_hold_at_most_the_limit_of_upsampled_logits():
    """Live tensor bytes (exact on CPU) of ``simple_test_labels`` beyond its forward: at most
    ``upsample_mem_limit`` of upsampled logits plus the label map's running max, index and
    a chunk's (25 bytes a pixel); the whole upsampled logits (mmdet's way) are
    several times more."""
    from ckptzoo.memory.measure.trackers import LiveTensorTracker
    head = _head(num_stuff_classes=53, in_channels=8).eval()
    x = _feats(n=1, size=64)
    meta = dict(pad_shape=(64, 64, 3), img_shape=(64, 64, 3), ori_shape=(192, 160, 3),
                batch_input_shape=(64, 64))
    pixels = 64 * 64 + 192 * 160
    head.upsample_mem_limit = limit = 6 * pixels * 4   # six channels at a time

    def peak(fn):
        with torch.no_grad(), LiveTensorTracker() as tracker:
            tracker.track(head, x)
            fn()
        return tracker.peak_bytes - tracker.baseline_bytes

    forward = peak(lambda: head(x))
    labels = peak(lambda: head.simple_test_labels(x, [meta], rescale=True))
    full = peak(lambda: head.simple_test(x, [meta], rescale=True))
    assert labels - forward <= limit + 25 * 192 * 160
    assert full - forward >= 54 * 192 * 160 * 4 > 2 * (labels - forward)
