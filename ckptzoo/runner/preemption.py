"""Preemption: SIGTERM or SIGINT stop a run between iterations with a resumable checkpoint.

Clusters preempt jobs with SIGTERM (SIGINT is Ctrl-C). While a runner runs, both only set a
flag; the runner looks at it after every iteration, after every evaluation or validation phase
(both run inside the iteration or epoch they follow) and so after every checkpoint save. When
set, it writes ``preempted_iter_<N>.pth`` with the exact position (completed iterations,
position in the epoch, accumulated gradients, loss-scaler state) and ``latest.pth`` pointing at
it, then exits with status ``128 + signal number`` (143 for SIGTERM, 130 for SIGINT: what a
shell reports for a process ended by that signal).
``--auto-resume`` continues from it.

Distributed: the ranks agree every iteration (an all-reduce of the flag), so a signal to any
one rank stops all of them at the same iteration; rank 0 writes, the others wait at a barrier.
A second SIGINT interrupts at once (``KeyboardInterrupt``).

DataLoader workers are shielded: torchrun (``os.killpg``), Ctrl-C and schedulers signal the
whole process group, and torch's workers die on such a signal, which would end the run with
"DataLoader worker exited unexpectedly" instead of a checkpoint. In the runner's loaders (and
the evaluation hooks' loaders) the workers ignore SIGINT and every SIGTERM but their parent's
(the loader's own shutdown), as torch's handler does for the parent.
"""
import os
import signal
import threading

import torch
import torch.distributed as dist

__all__ = ['TrainingPreempted', 'PreemptionFlag', 'PREEMPTION_SIGNALS', 'shield_workers']

PREEMPTION_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class TrainingPreempted(SystemExit):
    """Raised by a runner that stopped on a signal after saving ``checkpoint``.

    A ``SystemExit``: uncaught it ends the process with ``exit_code`` (128 + the signal number)
    and no traceback; ``except Exception`` does not swallow it.
    """

    def __init__(self, signum, checkpoint=None):
        self.signum = int(signum)
        self.checkpoint = checkpoint
        super().__init__(128 + self.signum)

    @property
    def exit_code(self):
        return self.code

    def __str__(self):
        saved = (f'saved {self.checkpoint}' if self.checkpoint else
                 'nothing saved (the runner has no work_dir)')
        return (f'training preempted by {signal.Signals(self.signum).name}: {saved}; exit '
                f'status {self.code}')


class PreemptionFlag:
    """Signal handlers that set a flag, installed for the duration of a ``with`` block."""

    def __init__(self):
        self.signum = 0
        self._previous = {}

    def _handle(self, signum, frame):
        if self.signum and signum == signal.SIGINT:
            raise KeyboardInterrupt  # a second Ctrl-C: stop now
        self.signum = self.signum or signum
        os.write(2, f'\n{signal.Signals(signum).name} received: stopping after this iteration '
                    'with a resumable checkpoint\n'.encode())

    def __enter__(self):
        self.signum = 0
        if threading.current_thread() is threading.main_thread():  # else signals can't be set
            for signum in PREEMPTION_SIGNALS:
                self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(self, *exc):
        for signum, handler in self._previous.items():
            signal.signal(signum, handler if handler is not None else signal.SIG_DFL)
        self._previous = {}
        return False

    def agreed(self):
        """The signal any rank received (0: none). A collective call under torch.distributed:
        every rank calls it at the same points."""
        if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
            return self.signum
        device = 'cpu'
        if dist.get_backend() == 'nccl':
            device = torch.device('cuda', torch.cuda.current_device())
        flag = torch.tensor([self.signum], dtype=torch.int32, device=device)
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        return int(flag.item())


class _ShieldedWorkerInit:
    """``worker_init_fn`` that shields the worker, then calls the loader's own (picklable, for
    the spawn start method)."""

    def __init__(self, worker_init_fn):
        self.worker_init_fn = worker_init_fn

    def __call__(self, worker_id):
        _shield_this_worker()
        if self.worker_init_fn is not None:
            self.worker_init_fn(worker_id)


def _shield_this_worker():
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if not hasattr(signal, 'pthread_sigmask'):  # Windows: no process groups to worry about
        return
    parent = os.getppid()
    # SIGTERM stays blocked (pending) and one thread waits for it, which tells who sent it
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})

    def wait():
        while True:
            info = signal.sigwaitinfo({signal.SIGTERM})
            if info.si_pid == parent or os.getppid() != parent:
                os._exit(0)

    threading.Thread(target=wait, name='ckptzoo-sigterm', daemon=True).start()


def shield_workers(loaders):
    """Make the workers of these DataLoaders ignore preemption signals not sent by the loader
    (call before they start: at ``iter(loader)``)."""
    from torch.utils.data import DataLoader
    for loader in loaders:
        if isinstance(loader, DataLoader) and loader.num_workers > 0 and not isinstance(
                loader.worker_init_fn, _ShieldedWorkerInit):
            loader.worker_init_fn = _ShieldedWorkerInit(loader.worker_init_fn)
