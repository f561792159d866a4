"""Shared helpers for the with_cp == plain tests of the backbones."""
import torch
import torch.utils.checkpoint as torch_cp


class CountingCheckpoint:
    """Stands in for ``torch.utils.checkpoint.checkpoint`` and counts the calls."""

    def __init__(self):
        self.calls = 0
        self.original = torch_cp.checkpoint

    def __call__(self, *args, **kwargs):
        self.calls += 1
        return self.original(*args, **kwargs)


def run_once(model, x, seed):
    """Seeded train forward + backward; (outputs, input grad, grads by name, buffers by name)."""
    model.zero_grad(set_to_none=True)
    x = x.detach().clone().requires_grad_(x.requires_grad)
    torch.manual_seed(seed)
    outs = model(x)
    # a fixed random weighting of every output, so each element matters in the gradient
    gen = torch.Generator().manual_seed(1234)
    loss = sum((o * torch.randn(o.shape, generator=gen)).sum() for o in outs)
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
