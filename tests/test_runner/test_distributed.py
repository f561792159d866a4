"""DDP with accumulation: 2 gloo processes equal one process with the doubled batch, and
gradients are all-reduced only on the iterations that step."""
import os
import socket

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
from torch.utils.data import DataLoader, DistributedSampler

from ckptzoo.runner import (GradientCumulativeOptimizerHook, Hook, IterBasedRunner,
                            MMDistributedDataParallel)

from tests.helpers.toy import ToyDataset, flat_params, loader, make_model, quiet_logger

pytestmark = pytest.mark.subprocess

K, MAX_ITERS = 2, 4
CLIP = dict(max_norm=0.5)


class AllreduceCounter(Hook):
    """Records, per iteration, how many gradient buckets were all-reduced."""

    def __init__(self):
        self.calls = 0
        self.per_iter = []

    def comm_hook(self, state, bucket):
        self.calls += 1
        return allreduce_hook(state, bucket)

    def before_run(self, runner):
        runner.model.register_comm_hook(None, self.comm_hook)

    def after_train_iter(self, runner):
        self.per_iter.append(self.calls)
        self.calls = 0


def _worker(rank, port, out_dir):
    os.environ.update(MASTER_ADDR='127.0.0.1', MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group('gloo', rank=rank, world_size=2)
    try:
        model = MMDistributedDataParallel(make_model(), broadcast_buffers=False)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        data = DataLoader(ToyDataset(8), batch_size=1,
                          sampler=DistributedSampler(ToyDataset(8), 2, rank, shuffle=False))
        runner = IterBasedRunner(model, optimizer=optimizer, logger=quiet_logger(),
                                 max_iters=MAX_ITERS)
        runner.register_hook(GradientCumulativeOptimizerHook(cumulative_iters=K,
                                                             grad_clip=CLIP), 'ABOVE_NORMAL')
        counter = AllreduceCounter()
        runner.register_hook(counter, 'LOW')
        runner.run([data], [('train', 1)])
        torch.save(dict(params=flat_params(model.module), per_iter=counter.per_iter),
                   os.path.join(out_dir, f'rank{rank}.pth'))
    finally:
        dist.destroy_process_group()


def _free_port():
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


@pytest.mark.skipif(not dist.is_available(), reason='torch.distributed is not available')
def test_ddp_accumulation_equals_single_process_doubled_batch(tmp_path):
    mp.start_processes(_worker, args=(_free_port(), str(tmp_path)), nprocs=2,
                       start_method='fork')
    results = [torch.load(tmp_path / f'rank{r}.pth', weights_only=True) for r in range(2)]

    model = make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    runner = IterBasedRunner(model, optimizer=optimizer, logger=quiet_logger(),
                             max_iters=MAX_ITERS)
    runner.register_hook(GradientCumulativeOptimizerHook(cumulative_iters=K, grad_clip=CLIP),
                         'ABOVE_NORMAL')
    runner.run([loader(ToyDataset(8), batch_size=2)], [('train', 1)])  # batches [0,1], [2,3]..

    assert (flat_params(model) - flat_params(make_model())).abs().max() > 1e-2
    for result in results:
        torch.testing.assert_close(result['params'], flat_params(model), rtol=0, atol=1e-6)
        # all-reduce only when the optimizer steps (iterations 2 and 4)
        assert [n > 0 for n in result['per_iter']] == [False, True, False, True]
