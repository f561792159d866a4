"""An endless iterator over a DataLoader, for the iteration-based runner."""


class IterLoader:
    """Restarts the loader at the end of each epoch and calls ``set_epoch`` on its sampler.

    ``start_iter`` positions it for a resumed run: epoch ``start_iter // len(loader)`` with its
    first ``start_iter % len(loader)`` batches skipped, so a sampler whose order depends only on
    the epoch (``DistributedSampler``, seeded samplers, no shuffling) gives the very batches the
    uninterrupted run saw.
    """

    def __init__(self, dataloader, start_iter=0):
        self._dataloader = dataloader
        length = len(dataloader)
        if length == 0:
            raise ValueError('the data loader is empty')
        self._epoch = start_iter // length
        self._set_epoch()
        self.iter_loader = iter(dataloader)
        for _ in range(start_iter % length):
            next(self.iter_loader)

    @property
    def epoch(self):
        return self._epoch

    def _set_epoch(self):
        set_epoch_on_sampler(self._dataloader, self._epoch)

    def __next__(self):
        try:
            data = next(self.iter_loader)
        except StopIteration:
            self._epoch += 1
            self._set_epoch()
            self.iter_loader = iter(self._dataloader)
            data = next(self.iter_loader)
        return data

    def __len__(self):
        return len(self._dataloader)


def set_epoch_on_sampler(data_loader, epoch):
    """``set_epoch`` on the loader's sampler, or on its batch sampler's sampler."""
    for sampler in (getattr(data_loader, 'sampler', None),
                    getattr(getattr(data_loader, 'batch_sampler', None), 'sampler', None),
                    getattr(data_loader, 'batch_sampler', None)):
        if hasattr(sampler, 'set_epoch'):
            sampler.set_epoch(epoch)
            return True
    return False
