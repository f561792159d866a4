"""``DistributedDataParallel`` that keeps the runner's ``train_step`` / ``val_step`` contract.

The training forward must go through DDP's own ``__call__`` (that is where it prepares the
gradient all-reduce), so ``train_step`` hands the model its wrapper to call (mmcv's
MMDistributedDataParallel re-implemented DDP's forward for this).
"""
from torch.nn.parallel import DistributedDataParallel

__all__ = ['MMDistributedDataParallel']


class MMDistributedDataParallel(DistributedDataParallel):

    def train_step(self, data, optimizer=None, **kwargs):
        return self.module.train_step(data, optimizer, forward=self, **kwargs)

    def val_step(self, data, optimizer=None, **kwargs):
        return self.module.val_step(data, optimizer, forward=self, **kwargs)
