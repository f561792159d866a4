"""Shared helpers for the with_cp == plain tests: runs compared, checkpoint counters, the tiny
backbones and detector of the plan tests."""
import torch
import torch.nn as nn
import torch.utils.checkpoint as torch_cp
from torch.nn.modules.batchnorm import _BatchNorm

from ckptzoo.models import DenseNet, ResNet, SwinTransformer
from ckptzoo.models.checkpointing import CheckpointOwnerMixin
from ckptzoo.registry import build_model


class CountingCheckpoint:
    """Stands in for ``torch.utils.checkpoint.checkpoint`` and counts the calls."""

    def __init__(self):
        self.calls = 0
        self.original = torch_cp.checkpoint

    def __call__(self, *args, **kwargs):
        self.calls += 1
        return self.original(*args, **kwargs)


def counting_calls(monkeypatch):
    """``{'checkpoint': n, 'offload': n}``: the calls of ``torch.utils.checkpoint.checkpoint``
    and of ``torch.autograd.graph.save_on_cpu`` (the offload mode) from now on."""
    calls = dict(checkpoint=0, offload=0)
    real_cp, real_offload = torch_cp.checkpoint, torch.autograd.graph.save_on_cpu

    def counting_cp(fn, *args, **kwargs):
        calls['checkpoint'] += 1
        return real_cp(fn, *args, **kwargs)

    def counting_offload(*args, **kwargs):
        calls['offload'] += 1
        return real_offload(*args, **kwargs)
    monkeypatch.setattr(torch_cp, 'checkpoint', counting_cp)
    monkeypatch.setattr(torch.autograd.graph, 'save_on_cpu', counting_offload)
    return calls


def run_once(model, x, seed):
    """Seeded train forward + backward; (outputs, input grad, grads by name, buffers by name)."""
    model.zero_grad(set_to_none=True)
    x = x.detach().clone().requires_grad_(x.requires_grad)
    torch.manual_seed(seed)
    outs = model(x)
    # a fixed random weighting of every output, so each element matters in the gradient
    gen = torch.Generator().manual_seed(1234)
    loss = sum((o * torch.randn(o.shape, generator=gen).to(o.device)).sum() for o in outs)
    loss.backward()
    grads = {n: p.grad for n, p in model.named_parameters()}
    buffers = {n: b.clone() for n, b in model.named_buffers()}
    return [o.detach() for o in outs], x.grad, grads, buffers


def assert_same_run(ref, got, model):
    (outs_r, xg_r, grads_r, bufs_r), (outs_g, xg_g, grads_g, bufs_g) = ref, got
    assert len(outs_r) == len(outs_g)
    for a, b in zip(outs_r, outs_g):
        torch.testing.assert_close(b, a, rtol=0, atol=1e-6)
    if xg_r is None:
        assert xg_g is None
    else:
        torch.testing.assert_close(xg_g, xg_r, rtol=0, atol=1e-6)
    for name, p in model.named_parameters():
        if p.requires_grad:
            assert grads_r[name] is not None and grads_g[name] is not None, name
            assert grads_r[name].abs().sum() > 0, name
            torch.testing.assert_close(grads_g[name], grads_r[name], rtol=0, atol=1e-6,
                                       msg=lambda m: f'{name}: {m}')
        else:
            assert grads_r[name] is None and grads_g[name] is None, name
    assert bufs_r.keys() == bufs_g.keys()
    for name in bufs_r:
        torch.testing.assert_close(bufs_g[name], bufs_r[name], rtol=0, atol=0,
                                   msg=lambda m: f'{name}: {m}')


def one_thread():
    """A fixture body: one intra-op thread. On the shared 2-core test machine torch's thread
    pool spins against other processes and tiny models run ~30x slower with 2 threads."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def expected_checkpoints(depth, frozen_stages, reentrant, input_requires_grad):
    blocks = ResNet.arch_settings[depth][1]
    n = 0
    stem_trainable = frozen_stages < 0
    if stem_trainable and (input_requires_grad or not reentrant):
        n += 1
    for stage, num in enumerate(blocks, 1):
        if stage <= frozen_stages:
            continue
        # only the first trainable block can see an input that does not require grad
        first_sees_grad = input_requires_grad or stem_trainable or stage > frozen_stages + 1
        n += num - (1 if reentrant and not first_sees_grad else 0)
    return n


def train_pass(model, x, weights):
    model.zero_grad(set_to_none=True)
    x = x.detach().clone().requires_grad_(x.requires_grad)
    torch.manual_seed(0)
    outs = model(x)
    loss = sum((o * w).sum() for o, w in zip(outs, weights))
    loss.backward()
    return ([o.detach() for o in outs], x.grad,
            {n: p.grad for n, p in model.named_parameters() if p.requires_grad},
            {n: b.clone() for n, b in model.named_buffers()})


TINY_DENSE = dict(growth_rate=4, depths=(2, 2, 2), init_channels=8)


TINY_SWIN = dict(embed_dims=8, depths=(2, 2, 2), num_heads=(1, 2, 2))


def randomise_bn(model, seed=3):
    """Random BN statistics and affine parameters (seeded): a plain and a checkpointed run
    that differ in how BN is applied differ visibly. Returns ``model``."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, _BatchNorm):
                m.running_mean.copy_(torch.rand(m.running_mean.shape, generator=gen) - 0.5)
                m.running_var.copy_(torch.rand(m.running_var.shape, generator=gen) + 0.5)
                m.weight.copy_(torch.rand(m.weight.shape, generator=gen) + 0.5)
                m.bias.copy_(torch.rand(m.bias.shape, generator=gen) - 0.5)
    return model


class Detector(CheckpointOwnerMixin, nn.Module):
    """backbone -> FPN -> RetinaHead outputs, as a tuple (what run_once differentiates); the
    plan methods through the mixin, as ``BaseModel``."""

    def __init__(self, frozen_stages=-1):
        super().__init__()
        self.backbone = build_model(dict(type='ResNet', depth=18, base_channels=4,
                                         frozen_stages=frozen_stages, norm_eval=False,
                                         zero_init_residual=False))
        self.neck = build_model(dict(type='FPN', in_channels=[8, 16, 32], out_channels=8,
                                     start_level=0, add_extra_convs='on_input', num_outs=5,
                                     relu_before_extra_convs=True))
        self.bbox_head = build_model(dict(
            type='RetinaHead', num_classes=3, in_channels=8, feat_channels=8, stacked_convs=2,
            anchor_generator=dict(type='AnchorGenerator', octave_base_scale=4,
                                  scales_per_octave=1, ratios=[1.0],
                                  strides=[8, 16, 32, 64, 128])))

    def forward(self, x):
        feats = self.neck(self.backbone(x)[1:])
        cls, reg = self.bbox_head(feats)
        return tuple(cls) + tuple(reg)


def plan_model(kind, frozen_stages=-1):
    torch.manual_seed(0)
    if kind == 'resnet':
        model = ResNet(50, base_channels=4, frozen_stages=frozen_stages, norm_eval=False,
                       zero_init_residual=False, out_indices=(1, 3))
    elif kind == 'densenet':
        model = DenseNet(TINY_DENSE, bn_size=2, out_indices=(0, 1, 2), drop_rate=0.2,
                         frozen_stages=frozen_stages)
    elif kind == 'swin':
        model = SwinTransformer(TINY_SWIN, window_size=2, drop_path_rate=0.3, drop_rate=0.1,
                                out_indices=(0, 1, 2), frozen_stages=frozen_stages)
    else:
        model = Detector(frozen_stages)
    randomise_bn(model)
    return model.train()
