"""Preemption: SIGTERM, SIGINT or SIGHUP stop a run between iterations with a resumable
checkpoint.

Clusters preempt jobs with SIGTERM (SIGINT is Ctrl-C; SIGHUP comes from schedulers and closed
terminals, and is treated as SIGTERM). While a runner runs, each only sets a
flag; the runner looks at it after every iteration, after every evaluation or validation phase
(both run inside the iteration or epoch they follow) and so after every checkpoint save. When
set, it writes ``preempted_iter_<N>.pth`` with the exact position (completed iterations,
position in the epoch, accumulated gradients, loss-scaler state) and ``latest.pth`` pointing at
it, then exits with status ``128 + signal number`` (143 for SIGTERM, 130 for SIGINT, 129 for
SIGHUP: what a shell reports for a process ended by that signal).
``--auto-resume`` continues from it.

A stop that cannot wait for the next iteration still stops. While the run is blocked (an
evaluation that hangs, a join that never returns), a second SIGTERM (one second or more after
the first: a launcher forwarding the signal its process group also got delivers it twice at
once) or a first one not honoured within the grace period raises :class:`TrainingPreempted`
at once in the main thread, with the same exit status and no new checkpoint: it names the last
complete one, which ``--auto-resume`` continues from. The grace period is
``$CKPTZOO_PREEMPTION_GRACE`` seconds (default 20: torchrun, Slurm and Kubernetes send SIGKILL
30 s after their SIGTERM; ``inf`` waits for the next iteration however long it takes). A stop
requested during a checkpoint save waits for the save to complete: the whole save (the state
dict copy, the finiteness check, the hooks' ``before_save_checkpoint``, the write, fsync,
rename and ``latest.pth``) is one protected section (:meth:`PreemptionFlag.saving`). Should the
run or the process still not have ended 5 s later (the exception swallowed, a cleanup or an exit
handler that hangs: ``tools/train.py`` arms :func:`exit_within_deadline`), the process exits
with ``os._exit``. SIGINT follows the same rules (a second Ctrl-C one second or more after the
first stops at once, exit status 130).

The handlers belong to the process that installed them: a child forked while they are
installed (a ``multiprocessing.Pool`` worker, ``os.fork``) starts with the handlers the process
had before (SIGTERM's default ends it, as ``Pool.terminate()`` expects); both signals stay
blocked across the fork until the child has them, so one sent right after the fork is not lost
(Python drops a signal its inherited handler caught before the child's fork hooks ran). A
handler that still runs in a child forked past the fork hooks (C code) gives the signal its
default action. Programs started with exec get the default handlers anyway.

Distributed: the ranks agree every iteration (an all-reduce of the flag), so a signal to any
one rank stops all of them at the same iteration; rank 0 writes, the others wait at a barrier.
Once past that barrier (every rank agreed, the checkpoint complete) a further signal changes
nothing: a launcher such as torchrun sends SIGTERM to the workers still running as soon as the
first one has exited. In a program whose process ends with the run (``tools/train.py``, which
calls :func:`exit_on_stop`) the preemption signals are ignored from that point on, so that such
a SIGTERM cannot end a rank that is still on its way out with status -15 instead of 143, and the
process exits within 5 s (``os._exit``) should its exit hang.

DataLoader workers are shielded: torchrun (``os.killpg``), Ctrl-C and schedulers signal the
whole process group, and torch's workers die on such a signal, which would end the run with
"DataLoader worker exited unexpectedly" instead of a checkpoint. In the runner's loaders (and
the evaluation hooks' loaders) the workers ignore SIGINT, SIGHUP and every SIGTERM but their
parent's
(the loader's own shutdown), as torch's handler does for the parent. Forked workers start with
both signals blocked, so one that arrives before the worker has shielded itself waits for the
shield; a process forked by a worker gets the default handlers back (one a worker starts with
``subprocess``, exec without a fork hook, inherits SIGINT ignored and SIGTERM blocked).
"""
import contextlib
import multiprocessing
import os
import signal
import threading
import time

import torch
import torch.distributed as dist

__all__ = ['TrainingPreempted', 'PreemptionFlag', 'PREEMPTION_SIGNALS', 'shield_workers',
           'GRACE_ENV', 'exit_within_deadline', 'exit_on_stop']

# SIGHUP: schedulers and a closed terminal send it; treated as SIGTERM (exit status 129)
PREEMPTION_SIGNALS = tuple(getattr(signal, name) for name in ('SIGTERM', 'SIGINT', 'SIGHUP')
                           if hasattr(signal, name))
_IGNORED_BY_WORKERS = tuple(s for s in PREEMPTION_SIGNALS if s != signal.SIGTERM)
GRACE_ENV = 'CKPTZOO_PREEMPTION_GRACE'
DEFAULT_GRACE = 20.0
EXIT_DEADLINE = 5.0  # after a stop at once, seconds until os._exit if the run has not ended

_installed = []  # the PreemptionFlags whose handlers this process has installed, outermost first
_exit_on_stop = False  # set by a program whose process ends with the run (exit_on_stop)
_shielded_pid = None  # set in a shielded DataLoader worker


def _say(text):
    os.write(2, f'\n{text}\n'.encode())  # not print: a handler may interrupt a write to stderr


def _restore(previous):
    for signum, handler in previous.items():
        signal.signal(signum, handler if handler is not None else signal.SIG_DFL)


def _before_fork():
    # A signal reaching the child before its fork hook has run would be caught by the inherited
    # handler and then dropped by Python's own after-fork reset: block both until the reset.
    _fork.mask = signal.pthread_sigmask(signal.SIG_BLOCK, PREEMPTION_SIGNALS) \
        if _installed else None


def _after_fork_in_parent():
    if _fork.mask is not None:
        signal.pthread_sigmask(signal.SIG_SETMASK, _fork.mask)


def _after_fork_in_child():
    """Handlers and shields belong to the process that set them up, not to its children."""
    global _shielded_pid
    if threading.current_thread() is threading.main_thread():  # else signals can't be set
        while _installed:
            _restore(_installed.pop()._previous)  # innermost first: the outermost's last
        if _shielded_pid is not None:
            _shielded_pid = None
            signal.signal(signal.SIGINT, signal.default_int_handler)
            if hasattr(signal, 'SIGHUP'):
                signal.signal(signal.SIGHUP, signal.SIG_DFL)
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
    if getattr(_fork, 'mask', None) is not None:
        signal.pthread_sigmask(signal.SIG_SETMASK, _fork.mask)  # what waited acts now


_fork = threading.local()  # the forking thread's signal mask while it forks
if hasattr(os, 'register_at_fork') and hasattr(signal, 'pthread_sigmask'):
    os.register_at_fork(before=_before_fork, after_in_parent=_after_fork_in_parent,
                        after_in_child=_after_fork_in_child)


def grace_from_env():
    """The grace period in seconds from ``$CKPTZOO_PREEMPTION_GRACE`` (default 20)."""
    raw = os.environ.get(GRACE_ENV, '').strip()
    if not raw:
        return DEFAULT_GRACE
    return _check_grace(raw, f'{GRACE_ENV}')


def _check_grace(value, name='grace'):
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        seconds = None
    if seconds is None or isinstance(value, bool) or not seconds > 0:
        raise ValueError(f'{name} must be a number of seconds > 0 (inf: wait for the next '
                         f'iteration however long it takes), got {value!r}')
    return seconds


class TrainingPreempted(SystemExit):
    """Raised by a runner that stopped on a signal.

    Between iterations it saved ``checkpoint``; stopped at once (``stopped_now`` says why: a
    second signal, the grace period) ``checkpoint`` is the last complete one, or None.
    A ``SystemExit``: uncaught it ends the process with ``exit_code`` (128 + the signal number)
    and no traceback; ``except Exception`` does not swallow it.
    """

    def __init__(self, signum, checkpoint=None, stopped_now=None):
        self.signum = int(signum)
        self.checkpoint = checkpoint
        self.stopped_now = stopped_now
        super().__init__(128 + self.signum)

    @property
    def exit_code(self):
        return self.code

    def __str__(self):
        name = signal.Signals(self.signum).name
        if self.stopped_now:
            last = (f'the last complete checkpoint is {self.checkpoint}' if self.checkpoint
                    else 'no checkpoint was saved yet')
            return (f'training preempted by {name} ({self.stopped_now}): stopped at once, '
                    f'nothing new saved; {last}; exit status {self.code}')
        saved = (f'saved {self.checkpoint}' if self.checkpoint else
                 'nothing saved (the runner has no work_dir)')
        return f'training preempted by {name}: {saved}; exit status {self.code}'


class PreemptionFlag:
    """Signal handlers that set a flag, installed for the duration of a ``with`` block.

    Args:
        grace (float | None): seconds a signal may wait for the next iteration before the run
            stops at once; None reads ``$CKPTZOO_PREEMPTION_GRACE`` (default 20).
        last_checkpoint (callable | None): returns the newest complete checkpoint (named when
            the run stops at once).
        logger (logging.Logger | None): where a stop at once is logged, besides stderr.
    """

    repeat_s = 1.0  # a repeat sooner than this is one signal delivered twice

    def __init__(self, grace=None, last_checkpoint=None, logger=None):
        self.grace = grace_from_env() if grace is None else _check_grace(grace)
        self.last_checkpoint = last_checkpoint
        self.logger = logger
        self.signum = 0
        self._previous = {}
        self._pid = None
        self._active = False
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._saving = 0
        self._deferred = None
        self._stopping = None
        self._agreed = None
        self._ignoring = False

    def _handle(self, signum, frame):
        if os.getpid() != self._pid:  # a child forked past the fork hooks: not its handler
            _restore(self._previous)
            os.kill(os.getpid(), signum)
            return
        first = not self.signum
        self.signum = self.signum or signum
        if not self._active or self._stopping or self._agreed \
                or getattr(frame, 'f_code', None) is _EXIT_CODE:
            return  # the run is over, or ending (a raise in __exit__ would skip its cleanup)
        name = signal.Signals(signum).name
        if first:
            self._since = time.monotonic()
            limit = f' or in {self.grace:g} s' if self.grace != float('inf') else ''
            _say(f'{name} received: stopping after this iteration with a resumable checkpoint '
                 f'(at once on a second {name}{limit})')
            if self.grace != float('inf'):
                self._thread(self._grace_timer)
            return
        if self._expired:
            self._stop_now(f'{signal.Signals(self.signum).name} not honoured within '
                           f'{self.grace:g} s')
        elif time.monotonic() - self._since >= self.repeat_s:  # a second Ctrl-C too
            self._stop_now(f'second {name}')
        # else: one signal delivered twice (a launcher forwarding its group's, a terminal)

    def _thread(self, target):
        threading.Thread(target=target, name='ckptzoo-preemption', daemon=True).start()

    def _grace_timer(self):
        if self._done.wait(self.grace):
            return
        with self._lock:  # __exit__ takes it before restoring the handlers
            if self._active and not self._stopping:
                self._expired = True
                signal.pthread_kill(self._main, self.signum)  # interrupts a blocking call

    def _stop_now(self, reason):
        if self._saving:
            if not self._deferred:
                _say(f'{reason}: stopping once the checkpoint being written is complete')
            self._deferred = reason
            return
        checkpoint = self.last_checkpoint() if self.last_checkpoint else None
        self._stopping = TrainingPreempted(self.signum, checkpoint, stopped_now=reason)
        self._stopping.deadline = time.monotonic() + EXIT_DEADLINE
        last = f'is {checkpoint}' if checkpoint else 'does not exist yet'
        _say(f'{reason}: stopping now; the last complete checkpoint {last}')
        _restore(self._previous)  # a further signal acts as without the flag
        self._thread(self._exit_deadline)
        raise self._stopping

    def _exit_deadline(self):
        if self._done.wait(EXIT_DEADLINE):
            return
        while self._saving and not self._done.wait(1):  # never in the middle of a save
            pass
        with self._lock:
            if self._active:
                _say(f'the run did not end within {EXIT_DEADLINE:g} s of stopping: exiting '
                     f'with status {self._stopping.code}')
                os._exit(self._stopping.code)

    def stop_agreed(self, exc):
        """Every rank agreed to stop and the checkpoint is complete: ``exc`` (a
        :class:`TrainingPreempted`) is about to be raised. A signal from here on changes nothing;
        under :func:`exit_on_stop` the preemption signals are ignored until the process ends,
        which it does within 5 s (``os._exit(exc.code)``)."""
        self._agreed = exc
        if not (_exit_on_stop and self._active
                and threading.current_thread() is threading.main_thread()):
            return
        for signum in PREEMPTION_SIGNALS:  # SIG_IGN outlives the handlers and the interpreter
            signal.signal(signum, signal.SIG_IGN)
        self._ignoring = True
        exc.deadline = time.monotonic() + EXIT_DEADLINE
        _arm_exit_deadline(exc)

    @contextlib.contextmanager
    def saving(self):
        """A checkpoint save: a stop at once requested meanwhile waits for its end."""
        self._saving += 1
        try:
            yield
        finally:
            self._saving -= 1
        if not self._saving and self._deferred:
            self._stop_now(self._deferred)

    def __enter__(self):
        self.signum = 0
        self._expired = False
        self._deferred = self._stopping = self._agreed = None
        self._ignoring = False
        self._done = threading.Event()
        self._pid = os.getpid()
        if threading.current_thread() is threading.main_thread():  # else signals can't be set
            self._main = threading.get_ident()
            self._active = True
            _installed.append(self)
            for signum in PREEMPTION_SIGNALS:
                self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(self, exc_type, exc, tb):
        self._active = False  # from here the handler only sets the flag
        with self._lock:  # the timers no longer signal
            self._done.set()
        if self in _installed:
            _installed.remove(self)
        if not self._ignoring:  # else the process is on its way out: they stay ignored
            _restore(self._previous)
        self._previous = {}
        if exc is not None and exc is self._stopping and self.logger is not None:
            self.logger.warning(f'{exc}; continue with --auto-resume')
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


_EXIT_CODE = PreemptionFlag.__exit__.__code__


def exit_within_deadline(exc):
    """For the process's entry point, once a stop at once (``exc.stopped_now``) has reached it:
    the process exits with ``exc.code`` by ``os._exit`` unless it has ended by the deadline
    (5 s after the stop). The flag's own deadline ends with its ``with`` block; what follows it
    (loader workers joined one by one, exit handlers, threads the interpreter waits for) is
    bounded by this one."""
    if getattr(exc, 'stopped_now', None):
        _arm_exit_deadline(exc)


def exit_on_stop(enabled=True):
    """For the entry point of a program whose process ends when a run stops (``tools/train.py``):
    once every rank has agreed to stop and the checkpoint is complete
    (:meth:`PreemptionFlag.stop_agreed`), the preemption signals are ignored until the process
    ends, within 5 s. Without it (the runner used as a library) the handlers that were in place
    before the run are restored when it ends, as always."""
    global _exit_on_stop
    _exit_on_stop = bool(enabled)


def _arm_exit_deadline(exc):
    """``os._exit(exc.code)`` at ``exc.deadline`` unless the process has ended by then."""

    def deadline():
        time.sleep(max(getattr(exc, 'deadline', 0) - time.monotonic(), 0))
        _say(f'the run did not end within {EXIT_DEADLINE:g} s of stopping: exiting with status '
             f'{exc.code}')
        try:  # DataLoader workers end on their parent's SIGTERM (see shield_workers)
            for child in multiprocessing.active_children():
                child.terminate()
        except Exception:  # noqa: BLE001 (exiting anyway)
            pass
        os._exit(exc.code)

    threading.Thread(target=deadline, name='ckptzoo-exit-deadline', daemon=True).start()


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
    global _shielded_pid
    for signum in _IGNORED_BY_WORKERS:
        signal.signal(signum, signal.SIG_IGN)
    if not hasattr(signal, 'pthread_sigmask'):  # Windows: no process groups to worry about
        return
    _shielded_pid = os.getpid()  # its children get the default handlers back
    parent = os.getppid()
    # SIGTERM stays blocked (pending) and one thread waits for it, which tells who sent it
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    signal.pthread_sigmask(signal.SIG_UNBLOCK, _IGNORED_BY_WORKERS)  # blocked by _BlockedFork

    def wait():
        while True:
            info = signal.sigwaitinfo({signal.SIGTERM})
            if info.si_pid == parent or os.getppid() != parent:
                os._exit(0)

    threading.Thread(target=wait, name='ckptzoo-sigterm', daemon=True).start()


if hasattr(signal, 'pthread_sigmask') and 'fork' in multiprocessing.get_all_start_methods():

    class _BlockedForkProcess(multiprocessing.context.ForkProcess):
        """Forks with the preemption signals blocked: the child inherits the mask, so a signal
        that reaches a DataLoader worker before it has shielded itself waits for the shield
        (without, torch's own handler or Python's KeyboardInterrupt would end the worker)."""

        def start(self):
            mask = signal.pthread_sigmask(signal.SIG_BLOCK, PREEMPTION_SIGNALS)
            try:
                super().start()
            finally:
                signal.pthread_sigmask(signal.SIG_SETMASK, mask)

    class _ShieldedForkContext(multiprocessing.context.ForkContext):
        Process = _BlockedForkProcess

    _SHIELDED_FORK = _ShieldedForkContext()
else:  # pragma: no cover (Windows, macOS without fork)
    _SHIELDED_FORK = None


def _forks(loader):
    """The loader forks its workers with the standard fork context (a custom one is kept)."""
    ctx = loader.multiprocessing_context
    if ctx is not None:
        return type(ctx) is multiprocessing.context.ForkContext
    return (multiprocessing.get_start_method(allow_none=True)
            or multiprocessing.get_all_start_methods()[0]) == 'fork'


def shield_workers(loaders):
    """Make the workers of these DataLoaders ignore preemption signals not sent by the loader
    (call before they start: at ``iter(loader)``). A loader that forks its workers gets a fork
    context that starts them with those signals blocked until they are shielded."""
    from torch.utils.data import DataLoader
    for loader in loaders:
        if not isinstance(loader, DataLoader) or loader.num_workers == 0:
            continue
        if not isinstance(loader.worker_init_fn, _ShieldedWorkerInit):
            loader.worker_init_fn = _ShieldedWorkerInit(loader.worker_init_fn)
        if _SHIELDED_FORK is not None and loader.multiprocessing_context is not _SHIELDED_FORK \
                and _forks(loader):
            loader.multiprocessing_context = _SHIELDED_FORK
