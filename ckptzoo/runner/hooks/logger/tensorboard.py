"""mmcv 1.x TensorboardLoggerHook: scalars (and text) to TensorBoard."""
import os.path as osp

from ....registry import HOOKS
from .base import LoggerHook

__all__ = ['TensorboardLoggerHook']


@HOOKS.register_module()
class TensorboardLoggerHook(LoggerHook):
    """Write the log buffer, lr and momentum to ``log_dir`` (default ``<work_dir>/tf_logs``).

    tensorboard is an optional dependency (``pip install tensorboard``); it is imported when
    the run starts, so configs that do not use this hook never need it. Only rank 0 writes.
    """

    def __init__(self, log_dir=None, interval=10, ignore_last=True, reset_flag=False,
                 by_epoch=True):
        super().__init__(interval, ignore_last, reset_flag, by_epoch)
        self.log_dir = log_dir
        self.writer = None

    def before_run(self, runner):
        super().before_run(runner)
        if runner.rank != 0:
            return
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError as e:
            raise ImportError('TensorboardLoggerHook needs the tensorboard package: '
                              'pip install tensorboard (or pip install ckptzoo[tensorboard]); '
                              f'importing torch.utils.tensorboard failed with: {e}') from e
        if self.log_dir is None:
            self.log_dir = osp.join(runner.work_dir, 'tf_logs')
        self.writer = SummaryWriter(self.log_dir)

    def log(self, runner):
        if self.writer is None:
            return
        step = self.get_iter(runner)
        for tag, val in self.get_loggable_tags(runner, allow_text=True).items():
            if isinstance(val, str):
                self.writer.add_text(tag, val, step)
            else:
                self.writer.add_scalar(tag, val, step)

    def after_run(self, runner):
        if self.writer is not None:
            self.writer.close()
            self.writer = None
