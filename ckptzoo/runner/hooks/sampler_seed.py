"""mmcv's DistSamplerSeedHook: a new shuffle order per epoch for distributed samplers."""
from ...registry import HOOKS
from .hook import Hook

__all__ = ['DistSamplerSeedHook']


def _find_epoch_sampler(data_loader):
    # an IterLoader (iteration-based runner) wraps the torch DataLoader as ``_dataloader``
    loader = getattr(data_loader, '_dataloader', data_loader)
    sampler = getattr(loader, 'sampler', None)
    if hasattr(sampler, 'set_epoch'):
        return sampler
    # a DataLoader given a batch_sampler has a SequentialSampler as ``sampler``; the sampler
    # that shuffles is the batch sampler's own
    batch_sampler = getattr(loader, 'batch_sampler', None)
    for candidate in (getattr(batch_sampler, 'sampler', None), batch_sampler):
        if hasattr(candidate, 'set_epoch'):
            return candidate
    return None


@HOOKS.register_module()
class DistSamplerSeedHook(Hook):
    """Calls ``set_epoch(runner.epoch)`` on the data loader's sampler before each epoch.

    ``DistributedSampler`` seeds its shuffle with ``seed + epoch``; without this every epoch
    sees the same order. Loaders whose samplers have no ``set_epoch`` are left alone.
    """

    def before_epoch(self, runner):
        sampler = _find_epoch_sampler(getattr(runner, 'data_loader', None))
        if sampler is not None:
            sampler.set_epoch(runner.epoch)
