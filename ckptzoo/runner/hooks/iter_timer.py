"""mmcv's IterTimerHook: how long each iteration and its data loading took, into the log buffer."""
import time

from ...registry import HOOKS
from .hook import Hook

__all__ = ['IterTimerHook']


@HOOKS.register_module()
class IterTimerHook(Hook):
    """Puts ``data_time`` (end of the last iteration to the start of this one: waiting for the
    data loader) and ``time`` (end of the last iteration to the end of this one) into
    ``runner.log_buffer``; the logger hooks average and print them and compute the ETA."""

    def before_epoch(self, runner):
        self.t = time.time()

    def before_iter(self, runner):
        if not hasattr(self, 't'):  # a runner that calls no epoch stage (iteration-based)
            self.t = time.time()
        runner.log_buffer.update({'data_time': time.time() - self.t})

    def after_iter(self, runner):
        now = time.time()
        runner.log_buffer.update({'time': now - self.t})
        self.t = now
