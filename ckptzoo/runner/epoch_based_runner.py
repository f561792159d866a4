"""mmcv 1.x's EpochBasedRunner: train / val by epochs, following a workflow."""
import itertools

from ..registry import RUNNERS
from .base_runner import BaseRunner
from .iter_loader import set_epoch_on_sampler
from .utils import get_model_device, move_to_device


@RUNNERS.register_module()
class EpochBasedRunner(BaseRunner):
    """``run(data_loaders, workflow)`` with e.g. ``workflow=[('train', 1), ('val', 1)]``.

    Resuming from a checkpoint saved mid-epoch (``CheckpointHook(by_epoch=False)``) skips the
    batches of that epoch already trained, so with a sampler whose order depends only on the
    epoch the run continues exactly where it stopped.
    """

    #: counts training in epochs (hooks read it instead of importing this class)
    by_epoch = True
    _epoch_done = False  # inside after_train_epoch

    def _checkpoint_position(self):
        if self.mode == 'train' and self._in_train_iter:
            # saved from after_train_iter: the current iteration is complete
            inner = self._inner_iter + 1
            if self.data_loader is not None and inner == len(self.data_loader):
                return self._epoch + 1, self._iter + 1, 0
            return self._epoch, self._iter + 1, inner
        if self.mode == 'train' and self._epoch_done:
            return self._epoch + 1, self._iter, 0  # saved from after_train_epoch
        return self._epoch, self._iter, 0

    def _batches(self, data_loader):
        skip, self._resume_inner_iter = self._resume_inner_iter, 0
        return itertools.islice(data_loader, skip, None), skip

    def train(self, data_loader, **kwargs):
        self.model.train()
        self.mode = 'train'
        self.data_loader = data_loader
        self._max_iters = self._max_epochs * len(self.data_loader)
        self._epoch_done = False
        set_epoch_on_sampler(data_loader, self._epoch)
        self.call_hook('before_train_epoch')
        batches, skip = self._batches(data_loader)
        device = get_model_device(self.model)
        for i, data_batch in enumerate(batches, start=skip):
            self.data_batch = data_batch
            self._inner_iter = i
            self.call_hook('before_train_iter')
            self.run_iter(move_to_device(data_batch, device), train_mode=True, **kwargs)
            self._in_train_iter = True
            self.call_hook('after_train_iter')
            if i + 1 < len(data_loader):  # at the end of the epoch: after its hooks
                self._check_preemption()
            self._in_train_iter = False
            del self.data_batch
            self._iter += 1
        self._epoch_done = True
        self.call_hook('after_train_epoch')
        self._epoch_done = False
        self._epoch += 1

    def val(self, data_loader, **kwargs):
        self.model.eval()
        self.mode = 'val'
        self.data_loader = data_loader
        self.call_hook('before_val_epoch')
        device = get_model_device(self.model)
        for i, data_batch in enumerate(data_loader):
            self.data_batch = data_batch
            self._inner_iter = i
            self.call_hook('before_val_iter')
            self.run_iter(move_to_device(data_batch, device), train_mode=False)
            self.call_hook('after_val_iter')
            del self.data_batch
        self.call_hook('after_val_epoch')

    def run(self, data_loaders, workflow, max_epochs=None, **kwargs):
        """Run ``workflow`` (a list of ``(mode, epochs)``) until ``max_epochs`` are trained."""
        _check_workflow(data_loaders, workflow)
        if max_epochs is not None:
            self._max_epochs = max_epochs
        if self._max_epochs is None:
            raise ValueError('max_epochs must be set for EpochBasedRunner')
        for i, (mode, epochs) in enumerate(workflow):
            if mode == 'train':
                self._max_iters = self._max_epochs * len(data_loaders[i])
                break
        self.logger.info('Start running, work_dir: %s', self.work_dir)
        self.logger.info('Hooks will be executed in the following order:\n%s',
                         self.get_hook_info())
        self.logger.info('workflow: %s, max: %d epochs', workflow, self._max_epochs)
        with self._preemptible(data_loaders):
            self.call_hook('before_run')
            while self.epoch < self._max_epochs:
                for i, (mode, epochs) in enumerate(workflow):
                    runner = getattr(self, mode)
                    for _ in range(epochs):
                        if mode == 'train' and self.epoch >= self._max_epochs:
                            break
                        runner(data_loaders[i], **kwargs)
                        if self.epoch < self._max_epochs:
                            self._check_preemption()
            self.call_hook('after_run')


def _check_workflow(data_loaders, workflow):
    if not isinstance(data_loaders, (list, tuple)):
        raise TypeError(f'data_loaders must be a list, got {type(data_loaders).__name__}')
    if not isinstance(workflow, (list, tuple)) or not workflow:
        raise TypeError(f'workflow must be a non-empty list of (mode, n) pairs, got {workflow!r}')
    if len(data_loaders) != len(workflow):
        raise ValueError(f'one data loader per workflow phase: {len(data_loaders)} loaders for '
                         f'workflow {workflow!r}')
    for flow in workflow:
        if (not isinstance(flow, (list, tuple)) or len(flow) != 2
                or flow[0] not in ('train', 'val') or not isinstance(flow[1], int)
                or flow[1] < 1):
            raise ValueError("each workflow phase must be ('train' or 'val', a positive int), "
                             f'got {flow!r}')
