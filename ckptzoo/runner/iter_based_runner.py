"""mmcv 1.x's IterBasedRunner: train / val by iterations over endless loaders."""

from ..registry import RUNNERS
from .base_runner import BaseRunner
from .epoch_based_runner import _check_workflow
from .iter_loader import IterLoader
from .utils import get_model_device, move_to_device


@RUNNERS.register_module()
class IterBasedRunner(BaseRunner):
    """``run(data_loaders, workflow)`` with e.g. ``workflow=[('train', 1000), ('val', 100)]``.

    ``runner.epoch`` is the loader's epoch. A resumed run continues the train loader at the
    batch after the last one trained (see :class:`IterLoader`).
    """

    def save_checkpoint(self, out_dir, filename_tmpl='iter_{}.pth', save_optimizer=True,
                        meta=None, create_symlink=True, filename_index=None):
        return super().save_checkpoint(out_dir, filename_tmpl, save_optimizer, meta,
                                       create_symlink, filename_index)

    def _checkpoint_position(self):
        iters = self._iter + 1 if self._in_train_iter else self._iter
        return self._epoch, iters, 0

    def train(self, data_loader, **kwargs):
        self.model.train()
        self.mode = 'train'
        self.data_loader = data_loader
        self._epoch = data_loader.epoch
        data_batch = next(data_loader)
        self.data_batch = data_batch
        self.call_hook('before_train_iter')
        self.run_iter(move_to_device(data_batch, get_model_device(self.model)), True, **kwargs)
        self._in_train_iter = True
        self.call_hook('after_train_iter')
        self._in_train_iter = False
        del self.data_batch
        self._inner_iter += 1
        self._iter += 1

    def val(self, data_loader, **kwargs):
        self.model.eval()
        self.mode = 'val'
        self.data_loader = data_loader
        data_batch = next(data_loader)
        self.data_batch = data_batch
        self.call_hook('before_val_iter')
        self.run_iter(move_to_device(data_batch, get_model_device(self.model)), False)
        self.call_hook('after_val_iter')
        del self.data_batch
        self._inner_iter += 1

    def run(self, data_loaders, workflow, max_iters=None, **kwargs):
        _check_workflow(data_loaders, workflow)
        if max_iters is not None:
            self._max_iters = max_iters
        if self._max_iters is None:
            raise ValueError('max_iters must be set for IterBasedRunner')
        self.logger.info('Start running, work_dir: %s', self.work_dir)
        self.logger.info('Hooks will be executed in the following order:\n%s',
                         self.get_hook_info())
        self.logger.info('workflow: %s, max: %d iters', workflow, self._max_iters)
        with self._preemptible(data_loaders):
            self.call_hook('before_run')
            iter_loaders = [IterLoader(loader, self._iter if mode == 'train' else 0)
                            for loader, (mode, _) in zip(data_loaders, workflow)]
            self.call_hook('before_epoch')
            while self.iter < self._max_iters:
                for i, (mode, iters) in enumerate(workflow):
                    self._inner_iter = 0
                    runner = getattr(self, mode)
                    for _ in range(iters):
                        if mode == 'train' and self.iter >= self._max_iters:
                            break
                        runner(iter_loaders[i], **kwargs)
                        if self.iter < self._max_iters:
                            self._check_preemption()
            self.call_hook('after_epoch')
            self.call_hook('after_run')
