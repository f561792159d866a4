"""The every-mode check for model parts whose input is one tensor (backbones) or a list of them
(necks): a plain run and one under a checkpoint plan (or segments) give the same outputs,
input and parameter gradients and BN buffers, and the plan really checkpoints."""
import copy

import torch
import torch.utils.checkpoint as torch_cp

from .checkpointing import randomise_bn  # noqa: F401  (the modules import it from here)


def train_run(model, inputs, seed=5):
    """Seeded forward + backward of a fixed random weighting of every output."""
    model.zero_grad(set_to_none=True)
    single = isinstance(inputs, torch.Tensor)
    xs = [t.detach().clone().requires_grad_(True) for t in ([inputs] if single else inputs)]
    torch.manual_seed(seed)
    outs = model(xs[0] if single else xs)
    outs = (outs, ) if isinstance(outs, torch.Tensor) else outs
    gen = torch.Generator().manual_seed(1234)
    loss = sum((o * torch.randn(o.shape, generator=gen, dtype=o.dtype)).sum() for o in outs)
    loss.backward()
    return ([o.detach() for o in outs], [x.grad for x in xs],
            {n: p.grad for n, p in model.named_parameters()},
            {n: b.clone() for n, b in model.named_buffers()})


def assert_same(ref, got, atol=1e-10):
    for a, b in zip(ref[0] + ref[1], got[0] + got[1]):
        torch.testing.assert_close(b, a, rtol=0, atol=atol)
    assert len(ref[0]) == len(got[0])
    for name, g in ref[2].items():
        if g is None:
            assert got[2][name] is None, name
        else:
            torch.testing.assert_close(got[2][name], g, rtol=0, atol=atol,
                                       msg=lambda m: f'{name}: {m}')
    for name, b in ref[3].items():
        torch.testing.assert_close(got[3][name], b, rtol=0, atol=0, msg=lambda m: f'{name}: {m}')


class Counting:
    """Counts real checkpoints and offloads while installed (monkeypatch)."""

    def __init__(self, monkeypatch):
        self.calls = 0
        real_cp, real_off = torch_cp.checkpoint, torch.autograd.graph.save_on_cpu

        def cp(*args, **kwargs):
            self.calls += 1
            return real_cp(*args, **kwargs)

        def off(*args, **kwargs):
            self.calls += 1
            return real_off(*args, **kwargs)

        monkeypatch.setattr(torch_cp, 'checkpoint', cp)
        monkeypatch.setattr(torch.autograd.graph, 'save_on_cpu', off)


def assert_mode_exact(plain, inputs, monkeypatch, mode=None, segments=None, min_calls=1,
                      seed=5):
    """``plain`` (train mode, float64) against a copy under ``{'*': mode}`` or ``segments``."""
    model = copy.deepcopy(plain)
    if mode is not None:
        model.set_checkpoint_plan({'*': mode})
    if segments is not None:
        model.set_checkpoint_segments(segments)
    ref = train_run(plain, inputs, seed)
    counting = Counting(monkeypatch)
    got = train_run(model, inputs, seed)
    assert_same(ref, got)
    assert counting.calls >= min_calls, (counting.calls, min_calls)
    return ref
