"""Faults on cue for training processes, and a cheap way to start those processes.

``FaultHook`` (a custom hook in the config) reads ``CKPTZOO_FAULT=SIGNAL:POINT:N[:RANK]``:
it sends itself ``SIGNAL`` (``TERM`` or ``KILL``) on rank ``RANK`` (default 0) at ``POINT``;
``TERMPG`` sends SIGTERM to its whole process group (DataLoader workers included) from another
process, as torchrun and Ctrl-C do (the run then starts in a process group of its own);
``HANG`` blocks for good at ``POINT`` (a wait that a signal handler's exception interrupts, as
a ``Pool.join`` that never returns) and ``WEDGE`` also swallows every exception there (only
``os._exit`` ends it); both first print ``stuck in the evaluation``. ``CKPTZOO_LINGER=S`` also
starts a non-daemon thread that sleeps S seconds (the interpreter waits for it at exit: an exit
path that hangs). ``CKPTZOO_SLOW_EXIT=S`` makes the rank that gets the fault take S seconds more
to exit (an exit handler that sleeps: a rank still on its way out when another has exited):

* ``iter:N`` right after iteration N (1-based; hooks of that iteration have run);
* ``eval:N`` inside the evaluation that follows iteration N, before the model runs on the data;
* ``save:N`` inside the checkpoint save that follows iteration N: SIGTERM before the bytes are
  written, SIGKILL after half of them are (a partial temporary file is left behind).

``start_train(argv, ...)`` runs ``tools/train.py``'s ``main(argv)`` in a forked child of the test
process: a real process that a signal can stop or kill, without paying for a fresh interpreter
and the imports of torch (seconds each on a 2-core machine).
"""
import atexit
import io
import multiprocessing as mp
import os
import os.path as osp
import signal
import sys
import threading
import time
import warnings

import numpy as np
import torch

from ckptzoo.registry import DATASETS, HOOKS
from ckptzoo.runner.hooks import EvalHook, Hook

from tests.helpers.toy import ToyDataset
from tests.helpers.tools import load_tool

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
TRAIN = osp.join(ROOT, 'tools', 'train.py')


@DATASETS.register_module(force=True)
class ToyEvalDataset(ToyDataset):
    """ToyDataset with ``evaluate`` (mean squared error), for EvalHook."""

    def __init__(self, test_mode=False, **kwargs):
        super().__init__(**kwargs)

    def evaluate(self, results, logger=None, **kwargs):
        return dict(mse=float(np.mean((np.array(results) - self.y.numpy()) ** 2)))


@HOOKS.register_module(force=True)
class FaultHook(Hook):

    def __init__(self):
        spec = os.environ.get('CKPTZOO_FAULT')
        self.signal = self.point = self.at = None
        if not spec:
            return
        parts = spec.split(':')
        rank = int(parts[3]) if len(parts) > 3 else 0
        if rank != int(os.environ.get('RANK', 0)):
            return
        self.group = parts[0] == 'TERMPG'
        self.stuck = parts[0] if parts[0] in ('HANG', 'WEDGE') else None
        self.signal = (signal.SIGTERM if self.group or self.stuck
                       else getattr(signal, 'SIG' + parts[0]))
        self.point, self.at = parts[1], int(parts[2])

    def _fire(self):
        slow_exit = float(os.environ.get('CKPTZOO_SLOW_EXIT', 0))
        if slow_exit:
            atexit.register(time.sleep, slow_exit)
        if self.stuck:
            self._get_stuck()
        if not self.group:
            os.kill(os.getpid(), self.signal)
            return
        group, pid = os.getpgid(0), os.fork()
        if pid == 0:  # a sender that is not the workers' parent
            os.killpg(group, self.signal)
            os._exit(0)
        os.waitpid(pid, 0)

    def _get_stuck(self):
        print(f'stuck in the evaluation after iteration {self.at}', flush=True)
        while True:
            try:
                threading.Event().wait()
            except BaseException:
                if self.stuck != 'WEDGE':
                    raise

    def before_run(self, runner):
        self.runner = runner
        linger = float(os.environ.get('CKPTZOO_LINGER', 0))
        if linger:
            threading.Thread(target=time.sleep, args=(linger, ), name='lingering').start()
        if self.point == 'eval':
            for hook in runner.hooks:
                if isinstance(hook, EvalHook):
                    hook.test_fn = self._wrap_test(hook.test_fn)
        elif self.point == 'save':
            self._patch_save()

    def after_train_iter(self, runner):
        if self.point == 'iter' and runner.iter + 1 == self.at:
            self._fire()

    def _due(self):  # after ``at`` completed iterations
        return self.point is not None and self.runner._checkpoint_position()[1] == self.at

    def _wrap_test(self, test_fn):

        def test(*args, **kwargs):
            if self._due():
                self.point = None
                self._fire()
            return test_fn(*args, **kwargs)

        return test

    def _patch_save(self):
        real_save = torch.save

        def save(obj, f, *args, **kwargs):
            if not self._due() or self.runner.mode != 'train':
                return real_save(obj, f, *args, **kwargs)
            self.point = None
            if self.signal == signal.SIGKILL:
                buf = io.BytesIO()
                real_save(obj, buf, *args, **kwargs)
                f.write(buf.getvalue()[:buf.tell() // 2])
                f.flush()
                os.fsync(f.fileno())
            self._fire()
            return real_save(obj, f, *args, **kwargs)

        torch.save = save


def _show_warning(msg):
    sys.stderr.write(warnings.formatwarning(msg.message, msg.category, msg.filename,
                                            msg.lineno, msg.line))


def _child(argv, log_path, env):
    sys.stdout = sys.stderr = open(log_path, 'a', buffering=1)
    os.dup2(sys.stdout.fileno(), 1)  # what is written to the descriptors too (signal handlers)
    os.dup2(sys.stdout.fileno(), 2)
    warnings._showwarnmsg_impl = _show_warning  # pytest's recorder is inherited: print instead
    warnings.simplefilter('default')
    os.environ.update(env)
    if env.get('CKPTZOO_FAULT', '').startswith('TERMPG'):
        os.setpgrp()
    torch.set_num_threads(1)
    from mmengine.logging import MMLogger
    MMLogger._instance_dict.clear()  # a fresh logger (and log file) for this run
    load_tool('train.py').main(argv)


def start_train(argv, log_path, **env):
    """``tools/train.py argv`` in a forked child writing stdout and stderr to ``log_path``."""
    proc = mp.get_context('fork').Process(target=_child, args=(argv, str(log_path), env))
    proc.start()
    return proc


def wait(procs, timeout=120):
    """Exit codes of ``procs`` (negative: killed by that signal); kills all and fails when one
    is still running after ``timeout`` seconds (a hang)."""
    codes = []
    for proc in procs:
        proc.join(timeout)
        if proc.is_alive():
            for p in procs:
                if p.is_alive():
                    p.kill()
            raise TimeoutError(f'a training process hung for {timeout} s')
        codes.append(proc.exitcode)
    return codes
