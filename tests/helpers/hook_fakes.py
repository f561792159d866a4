"""A stand-in for the mmcv 1.x runners: calls the hook stages in the order and with the
``epoch`` / ``iter`` / ``inner_iter`` values of mmcv's EpochBasedRunner and IterBasedRunner."""
import logging
import os
import os.path as osp

import torch

from ckptzoo.runner import LogBuffer, get_priority


class ListHandler(logging.Handler):

    def __init__(self):
        super().__init__()
        self.messages = []

    def emit(self, record):
        self.messages.append(record.getMessage())


def make_logger(name):
    logger = logging.getLogger(f'ckptzoo.tests.{name}')
    logger.handlers.clear()
    logger.setLevel(logging.INFO)
    logger.propagate = False
    handler = ListHandler()
    logger.addHandler(handler)
    return logger, handler


class CumulativeStub:
    """What the runner finds of a gradient-accumulating optimizer hook."""

    def __init__(self, cumulative_iters):
        self.cumulative_iters = cumulative_iters
        self.priority = get_priority('ABOVE_NORMAL')


class FakeRunner:

    def __init__(self, work_dir, model=None, optimizer=None, meta=None, rank=0, world_size=1,
                 step_fn=None, name='runner'):
        self.model = model if model is not None else torch.nn.Linear(2, 2)
        self.optimizer = optimizer if optimizer is not None else torch.optim.SGD(
            self.model.parameters(), lr=0.01, momentum=0.9)
        self.work_dir = str(work_dir)
        self.logger, self.log_handler = make_logger(name)
        self.meta = meta
        self.mode = 'train'
        self.epoch = self.iter = self.inner_iter = 0
        self._max_epochs = self._max_iters = None
        self.data_loader = None
        self.outputs = {}
        self.log_buffer = LogBuffer()
        self.hooks = []
        self.rank, self.world_size = rank, world_size
        self.timestamp = '20240101_000000'
        self.step_fn = step_fn
        self.saved = []  # (out_dir, filename, save_optimizer, epoch, iter) per save_checkpoint

    @property
    def max_epochs(self):
        return self._max_epochs

    @property
    def max_iters(self):
        return self._max_iters

    def register_hook(self, hook, priority='NORMAL'):
        hook.priority = get_priority(priority)
        for i in range(len(self.hooks) - 1, -1, -1):
            if hook.priority >= self.hooks[i].priority:
                self.hooks.insert(i + 1, hook)
                return
        self.hooks.insert(0, hook)

    def call_hook(self, stage):
        for hook in self.hooks:
            fn = getattr(hook, stage, None)
            if fn is not None:
                fn(self)

    def _lrs(self, optim, key):
        return [group[key] if key == 'lr' else group.get('momentum', 0.)
                for group in optim.param_groups]

    def current_lr(self):
        if isinstance(self.optimizer, dict):
            return {k: self._lrs(o, 'lr') for k, o in self.optimizer.items()}
        return self._lrs(self.optimizer, 'lr')

    def current_momentum(self):
        if isinstance(self.optimizer, dict):
            return {k: self._lrs(o, 'momentum') for k, o in self.optimizer.items()}
        return self._lrs(self.optimizer, 'momentum')

    def save_checkpoint(self, out_dir, filename_tmpl=None, save_optimizer=True, meta=None,
                        create_symlink=True):
        by_iter = self._max_epochs is None
        if filename_tmpl is None:
            filename_tmpl = 'iter_{}.pth' if by_iter else 'epoch_{}.pth'
        filename = filename_tmpl.format(self.iter + 1 if by_iter else self.epoch + 1)
        os.makedirs(out_dir, exist_ok=True)
        with open(osp.join(out_dir, filename), 'w') as f:
            f.write('ckpt')
        self.saved.append((out_dir, filename, save_optimizer, self.epoch, self.iter))

    def _step(self, batch):
        outputs = self.step_fn(self, batch) if self.step_fn else dict(
            log_vars={'loss': float(batch)}, num_samples=1)
        self.outputs = outputs
        self.log_buffer.update(outputs['log_vars'], outputs['num_samples'])

    def run_epochs(self, data_loader, max_epochs):
        """mmcv EpochBasedRunner.run with workflow [('train', 1)]."""
        self._max_epochs = max_epochs
        self.data_loader = data_loader
        self.call_hook('before_run')
        while self.epoch < max_epochs:
            self.mode = 'train'
            self.data_loader = data_loader
            self._max_iters = max_epochs * len(data_loader)
            self.call_hook('before_train_epoch')
            for i, batch in enumerate(data_loader):
                self.inner_iter = i
                self.call_hook('before_train_iter')
                self._step(batch)
                self.call_hook('after_train_iter')
                self.iter += 1
            self.call_hook('after_train_epoch')
            self.epoch += 1
        self.call_hook('after_run')

    def run_iters(self, data_loader, max_iters):
        """mmcv IterBasedRunner.run with workflow [('train', 1)], cycling the loader."""
        self._max_iters = max_iters
        self.data_loader = data_loader
        self.call_hook('before_run')
        self.call_hook('before_epoch')
        while self.iter < max_iters:
            self.mode = 'train'
            self.inner_iter = self.iter % len(data_loader)
            batch = data_loader[self.inner_iter]
            self.call_hook('before_train_iter')
            self._step(batch)
            self.call_hook('after_train_iter')
            self.iter += 1
        self.call_hook('after_epoch')
        self.call_hook('after_run')
