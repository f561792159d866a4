"""Every-mode check of a dense head whose levels are checkpoint units: a plain run and one under
``{'*': mode}`` give the same outputs (every output of every level), input and parameter
gradients and BN buffers, and the plan really checkpoints (float64)."""
import copy

import torch

from .unit_modes import Counting, assert_same


def head_run(head, feats, seed=5):
    head.zero_grad(set_to_none=True)
    xs = [f.detach().clone().requires_grad_(True) for f in feats]
    torch.manual_seed(seed)
    outs = [o for per_level in head(xs) for o in per_level]
    gen = torch.Generator().manual_seed(1234)
    loss = sum((o * torch.randn(o.shape, generator=gen, dtype=o.dtype)).sum() for o in outs)
    loss.backward()
    return ([o.detach() for o in outs], [x.grad for x in xs],
            {n: p.grad for n, p in head.named_parameters()},
            {n: b.clone() for n, b in head.named_buffers()})


def assert_head_mode_exact(plain, feats, monkeypatch, mode):
    head = copy.deepcopy(plain)
    head.set_checkpoint_plan({'*': mode})
    ref = head_run(plain, feats)
    counting = Counting(monkeypatch)
    got = head_run(head, feats)
    assert_same(ref, got)
    assert counting.calls >= len(feats), counting.calls
