"""The checkpoint wrapper: guard, BN statistics, RNG, reentrant choice, sequential segments."""
import copy

import pytest
import torch
import torch.nn as nn
from torch.utils import checkpoint as torch_cp

from ckptzoo.models.checkpointing import checkpoint, checkpoint_sequential, should_checkpoint

pytestmark = pytest.mark.filterwarnings('error')




class Block(nn.Module):

    def __init__(self, c=4, p=0.0):
        super().__init__()
        self.conv = nn.Conv2d(c, c, 3, padding=1)
        self.bn = nn.BatchNorm2d(c)
        self.drop = nn.Dropout(p)
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        return self.drop(torch.relu(self.bn(self.conv(x))))


def _run(block, x, use_cp, use_reentrant=False, seed=0):
    torch.manual_seed(seed)
    block.zero_grad(set_to_none=True)
    x = x.detach().clone().requires_grad_(x.requires_grad)
    out = checkpoint(block, x, use_reentrant=use_reentrant) if use_cp else block(x)
    (out * torch.linspace(-1, 1, out.numel()).view_as(out)).sum().backward()
    grads = {n: p.grad.clone() for n, p in block.named_parameters()}
    return out.detach(), x.grad, grads, {n: b.clone() for n, b in block.named_buffers()}


@pytest.mark.parametrize('use_reentrant', [False, True])
@pytest.mark.parametrize('p', [0.0, 0.5])
def test_checkpoint_equals_plain_and_updates_bn_once(count_cp, use_reentrant, p):
    torch.manual_seed(1)
    plain = Block(p=p).train()
    ckpt = copy.deepcopy(plain)
    x = torch.randn(2, 4, 8, 8, requires_grad=True)
    ref = _run(plain, x, False)
    out = _run(ckpt, x, True, use_reentrant)
    assert count_cp['checkpoints'] == 1
    assert ckpt.calls == 2  # forward + recompute in backward
    torch.testing.assert_close(out[0], ref[0], rtol=0, atol=1e-6)
    torch.testing.assert_close(out[1], ref[1], rtol=0, atol=1e-6)
    for name in ref[2]:
        torch.testing.assert_close(out[2][name], ref[2][name], rtol=0, atol=1e-6)
    # running statistics updated exactly once, as in the plain run
    assert ckpt.bn.num_batches_tracked.item() == 1
    for name in ref[3]:
        torch.testing.assert_close(out[3][name], ref[3][name], rtol=0, atol=0)
    assert ckpt.bn.momentum == plain.bn.momentum


def test_plain_torch_checkpoint_updates_bn_twice():
    """The bug the wrapper fixes: torch's own recompute updates BN statistics again."""
    block = Block().train()
    x = torch.randn(2, 4, 8, 8, requires_grad=True)
    torch_cp.checkpoint(block, x, use_reentrant=False).sum().backward()
    assert block.bn.num_batches_tracked.item() == 2


def test_guard_no_grad_eval_and_frozen(count_cp):
    block = Block().train()
    x = torch.randn(2, 4, 8, 8, requires_grad=True)
    with torch.no_grad():
        checkpoint(block, x)
    block.eval()
    checkpoint(block, x).sum().backward()
    assert count_cp['checkpoints'] == 0
    assert block.calls == 2  # each ran once: nothing recomputed
    block.train()
    frozen_input = torch.randn(2, 4, 8, 8)
    # non-reentrant: a frozen input feeding trainable parameters is still checkpointed
    assert should_checkpoint((frozen_input, ), block, use_reentrant=False)
    # reentrant would give the parameters no gradient: run plainly
    assert not should_checkpoint((frozen_input, ), block, use_reentrant=True)
    for p in block.parameters():
        p.requires_grad = False
    assert not should_checkpoint((frozen_input, ), block, use_reentrant=False)
    assert should_checkpoint((x, ), block, use_reentrant=True)


def test_frozen_input_trainable_block_gets_gradients(count_cp):
    torch.manual_seed(0)
    plain = Block().train()
    ckpt = copy.deepcopy(plain)
    x = torch.randn(2, 4, 8, 8)
    ref = _run(plain, x, False)
    out = _run(ckpt, x, True, use_reentrant=False)
    assert count_cp['checkpoints'] == 1
    for name in ref[2]:
        torch.testing.assert_close(out[2][name], ref[2][name], rtol=0, atol=1e-6)


def test_checkpoint_sequential_equals_plain(count_cp):
    torch.manual_seed(0)
    seq = nn.Sequential(*[Block() for _ in range(5)]).train()
    ref_seq = copy.deepcopy(seq)
    x = torch.randn(2, 4, 8, 8, requires_grad=True)
    out = checkpoint_sequential(seq, 3, x)
    ref = ref_seq(x)
    torch.testing.assert_close(out, ref, rtol=0, atol=0)
    out.sum().backward()
    ref_x_grad = x.grad.clone()
    x.grad = None
    ref.sum().backward()
    torch.testing.assert_close(x.grad, ref_x_grad, rtol=0, atol=1e-6)
    assert count_cp['checkpoints'] == 2  # segments 1 and 2; the last runs plainly
    for a, b in zip(seq.modules(), ref_seq.modules()):
        if isinstance(a, nn.BatchNorm2d):
            assert a.num_batches_tracked.item() == b.num_batches_tracked.item() == 1
    with pytest.raises(ValueError, match='segments must be an int in'):
        checkpoint_sequential(seq, 0, x)


@pytest.mark.parametrize('use_reentrant', [False, True])
def test_nested_outputs_get_their_gradients_in_both_implementations(use_reentrant):
    """A region returning ``(a, (b, c))`` (SABL's box head): the reentrant autograd Function
    sees only top-level tensors, so the nested ones travel flattened."""
    torch.manual_seed(0)
    lin = nn.Linear(4, 4)
    x = torch.randn(3, 4, requires_grad=True)

    def region(inp):
        y = lin(inp)
        return y * 2, (y.sin(), [y.cos(), None])

    def total(out):
        a, (b, (c, none)) = out
        assert none is None
        return a.sum() + (b * 3).sum() + (c * 5).sum()

    total(region(x)).backward()
    ref = [x.grad.clone(), lin.weight.grad.clone()]
    x.grad, lin.weight.grad = None, None
    out = checkpoint(region, x, mode='full', use_reentrant=use_reentrant, module=lin)
    assert isinstance(out, tuple) and isinstance(out[1][1], list)
    total(out).backward()
    torch.testing.assert_close(x.grad, ref[0], rtol=0, atol=1e-6)
    torch.testing.assert_close(lin.weight.grad, ref[1], rtol=0, atol=1e-6)
