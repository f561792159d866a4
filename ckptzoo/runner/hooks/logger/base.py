"""mmcv 1.x LoggerHook: when to average the log buffer and hand it to a logger backend."""
import numbers

import numpy as np
import torch

from ....registry import HOOKS
from ..hook import Hook

__all__ = ['LoggerHook']


@HOOKS.register_module()
class LoggerHook(Hook):
    """Base of the logger hooks; subclasses implement :meth:`log`.

    Args:
        interval (int): log every ``interval`` iterations (inner iterations of the epoch when
            ``by_epoch``).
        ignore_last (bool): skip the short window at the end of an epoch.
        reset_flag (bool): clear the averaged output after logging; the last logger hook
            registered gets it set in ``before_run``, as mmcv, so each value is logged once.
        by_epoch (bool): count iterations within the epoch and print the epoch.
    """

    def __init__(self, interval=10, ignore_last=True, reset_flag=False, by_epoch=True):
        if not isinstance(interval, int) or isinstance(interval, bool) or interval <= 0:
            raise ValueError(f'interval must be a positive int, got {interval!r}')
        self.interval = interval
        self.ignore_last = ignore_last
        self.reset_flag = reset_flag
        self.by_epoch = by_epoch

    def log(self, runner):
        raise NotImplementedError(f'{type(self).__name__} must implement log')

    @staticmethod
    def is_scalar(val, include_np=True, include_torch=True):
        if isinstance(val, numbers.Number):
            return True
        if include_np and isinstance(val, np.ndarray) and val.ndim == 0:
            return True
        if include_torch and isinstance(val, torch.Tensor) and val.numel() == 1:
            return True
        return False

    def get_mode(self, runner):
        """'train' for training iterations, 'val' for validation and evaluation results."""
        if runner.mode == 'train':
            # evaluation results written during training carry no iteration time
            return 'train' if 'time' in runner.log_buffer.output else 'val'
        if runner.mode == 'val':
            return 'val'
        raise ValueError(f"runner.mode must be 'train' or 'val', got {runner.mode!r}")

    def get_epoch(self, runner):
        if runner.mode == 'train':
            return runner.epoch + 1
        if runner.mode == 'val':
            return runner.epoch  # the runner has already counted the training epoch
        raise ValueError(f"runner.mode must be 'train' or 'val', got {runner.mode!r}")

    def get_iter(self, runner, inner_iter=False):
        """1-based iteration: within the epoch when ``by_epoch and inner_iter``, else global."""
        if self.by_epoch and inner_iter:
            return runner.inner_iter + 1
        return runner.iter + 1

    def get_lr_tags(self, runner):
        lrs = runner.current_lr()
        if isinstance(lrs, dict):
            return {f'learning_rate/{name}': value[0] for name, value in lrs.items()}
        return {'learning_rate': lrs[0]}

    def get_momentum_tags(self, runner):
        momentums = runner.current_momentum()
        if isinstance(momentums, dict):
            return {f'momentum/{name}': value[0] for name, value in momentums.items()}
        return {'momentum': momentums[0]}

    def get_loggable_tags(self, runner, allow_scalar=True, allow_text=False, add_mode=True,
                          tags_to_skip=('time', 'data_time')):
        tags = {}
        for var, val in runner.log_buffer.output.items():
            if var in tags_to_skip:
                continue
            if self.is_scalar(val) and not allow_scalar:
                continue
            if isinstance(val, str) and not allow_text:
                continue
            if add_mode:
                var = f'{self.get_mode(runner)}/{var}'
            tags[var] = val
        tags.update(self.get_lr_tags(runner))
        tags.update(self.get_momentum_tags(runner))
        return tags

    def before_run(self, runner):
        for hook in runner.hooks[::-1]:
            if isinstance(hook, LoggerHook):
                hook.reset_flag = True
                break

    def before_epoch(self, runner):
        runner.log_buffer.clear()  # the logs of the last epoch

    def after_train_iter(self, runner):
        if self.by_epoch and self.every_n_inner_iters(runner, self.interval):
            runner.log_buffer.average(self.interval)
        elif not self.by_epoch and self.every_n_iters(runner, self.interval):
            runner.log_buffer.average(self.interval)
        elif self.end_of_epoch(runner) and not self.ignore_last:
            runner.log_buffer.average(self.interval)
        if runner.log_buffer.ready:
            self.log(runner)
            if self.reset_flag:
                runner.log_buffer.clear_output()

    def after_train_epoch(self, runner):
        if runner.log_buffer.ready:
            self.log(runner)
            if self.reset_flag:
                runner.log_buffer.clear_output()

    def after_val_epoch(self, runner):
        runner.log_buffer.average()
        self.log(runner)
        if self.reset_flag:
            runner.log_buffer.clear_output()
