"""mmdet 2.x ``SyncNormHook`` (YOLOX): after every ``interval``-th training epoch, and after
every epoch of the last ``num_last_epochs + 1``, the normalisation layers' parameters and
running statistics are averaged over the ranks (each rank's BatchNorm statistics drift apart
without SyncBN). A no-op in a single-process run.

Fix over mmdet: the switch to every epoch also holds for a run resumed after it (mmdet set
``interval = 1`` only when that exact epoch started). Integer buffers
(``num_batches_tracked``) are left alone: every rank counts the same.
"""
import torch
import torch.distributed as dist
from torch import nn

from ...registry import HOOKS
from .hook import Hook

__all__ = ['SyncNormHook', 'get_norm_states']


def get_norm_states(module):
    """``{name: tensor}`` of the normalisation layers' state (as mmdet)."""
    states = {}
    for name, child in module.named_modules():
        if isinstance(child, nn.modules.batchnorm._NormBase):
            for key, value in child.state_dict(keep_vars=True).items():
                states[f'{name}.{key}'] = value
    return states


@HOOKS.register_module()
class SyncNormHook(Hook):
    """Args (mmdet's): ``num_last_epochs`` (15), ``interval`` (1)."""

    def __init__(self, num_last_epochs=15, interval=1):
        for name, value, low in (('num_last_epochs', num_last_epochs, 0),
                                 ('interval', interval, 1)):
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f'SyncNormHook {name} must be an int >= {low}, '
                                 f'got {value!r}')
        self.interval = interval
        self.num_last_epochs = num_last_epochs

    def _interval(self, runner):
        last = runner.epoch + 1 >= runner.max_epochs - self.num_last_epochs
        return 1 if last else self.interval

    def after_train_epoch(self, runner):
        if (runner.epoch + 1) % self._interval(runner) != 0:
            return
        if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
            return
        world = dist.get_world_size()
        with torch.no_grad():
            for tensor in get_norm_states(runner.model).values():
                if tensor.is_floating_point():
                    dist.all_reduce(tensor.data.div_(world), op=dist.ReduceOp.SUM)
