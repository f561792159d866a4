"""mmdet 2.x ``YOLOXModeSwitchHook``: for the last epochs of training, the mixing
transforms (``skip_type_keys``: Mosaic, RandomAffine, MixUp) are left out of the
``MultiImageMixDataset`` and the head adds its L1 loss (``bbox_head.use_l1``).

As mmdet, the switch happens before epoch ``max_epochs - num_last_epochs - 1`` (0-based), so
the last ``num_last_epochs + 1`` epochs run without the mixing.

Fixes over mmdet: a run resumed after that epoch is switched too (mmdet switched only when
that exact epoch started, so a resumed run trained its last epochs with Mosaic and without
the L1 loss); persistent DataLoader workers are restarted through the loader's public state
(its iterator dropped, so the next epoch starts workers holding the switched dataset)
instead of mmdet's private ``_DataLoader__initialized`` flag.
"""
from ...registry import HOOKS
from ..utils import unwrap_model
from .hook import Hook

__all__ = ['YOLOXModeSwitchHook']


def _mix_dataset(dataset):
    """The dataset with ``update_skip_type_keys``, through wrappers that hold one."""
    seen = set()
    while dataset is not None and id(dataset) not in seen:
        if hasattr(dataset, 'update_skip_type_keys'):
            return dataset
        seen.add(id(dataset))
        dataset = getattr(dataset, 'dataset', None)
    return None


@HOOKS.register_module()
class YOLOXModeSwitchHook(Hook):
    """Args (mmdet's): ``num_last_epochs`` (15), ``skip_type_keys``
    (('Mosaic', 'RandomAffine', 'MixUp'))."""

    def __init__(self, num_last_epochs=15, skip_type_keys=('Mosaic', 'RandomAffine', 'MixUp')):
        if isinstance(num_last_epochs, bool) or not isinstance(num_last_epochs, int) \
                or num_last_epochs < 0:
            raise ValueError(f'YOLOXModeSwitchHook num_last_epochs must be a non-negative '
                             f'int, got {num_last_epochs!r}')
        self.num_last_epochs = num_last_epochs
        self.skip_type_keys = skip_type_keys
        self._switched = False

    def switched(self, runner):
        """Whether the epoch about to run is one of the last (switched) ones."""
        return runner.epoch + 1 >= runner.max_epochs - self.num_last_epochs

    def before_train_epoch(self, runner):
        if self._switched or not self.switched(runner):
            return
        loader = runner.data_loader
        dataset = _mix_dataset(loader.dataset)
        if dataset is None:
            raise TypeError(f'YOLOXModeSwitchHook switches the mixing transforms of a '
                            f'MultiImageMixDataset; the training set is a '
                            f'{type(loader.dataset).__name__}')
        runner.logger.info('No mosaic and mixup aug now!')
        dataset.update_skip_type_keys(list(self.skip_type_keys))
        if getattr(loader, 'persistent_workers', False) and \
                getattr(loader, '_iterator', None) is not None:
            loader._iterator = None  # the next iter() starts workers with the new dataset
        runner.logger.info('Add additional L1 loss now!')
        unwrap_model(runner.model).bbox_head.use_l1 = True
        self._switched = True
