"""How a training command's process ends, for an entry point (``tools/train.py``).

After a distributed run the process ends with ``os._exit`` once the threads the interpreter
waits for and the exit handlers (log files, loader workers) have run: gloo's threads outlive
``destroy_process_group`` (DDP's reducer keeps the group), and the interpreter's own teardown
with them alive aborted now and then ('terminate called without an active exception', status
-6 instead of 143 or 0). A run without a process group exits as Python does.
"""
import atexit
import os
import sys
import threading
import traceback

from .preemption import exit_on_stop

__all__ = ['run_and_exit', 'mark_process_group']

_process = dict(distributed=False)  # a process group was set up in this process


def mark_process_group():
    """Note that this process set up a process group (:func:`~.dist_utils.init_dist`)."""
    _process['distributed'] = True


def _exit_code(code):
    """What the interpreter makes of ``SystemExit(code)``."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


def run_and_exit(main, *args):
    """``main(*args)``, then the end of the process.

    Preempted, the process ignores the preemption signals from the moment every rank has
    agreed to stop and the checkpoint is complete, and ends within 5 s (:func:`exit_on_stop`):
    torchrun sends SIGTERM to the workers still running as soon as one has exited, which
    otherwise ended a rank still on its way out with -15 instead of 143."""
    exit_on_stop()
    try:
        main(*args)
        code = 0
    except SystemExit as exc:
        code = exc.code
    except BaseException:
        if not _process['distributed']:
            raise
        traceback.print_exc()
        code = 1
    if not _process['distributed']:
        sys.exit(code)
    code = _exit_code(code)
    if hasattr(threading, '_shutdown'):
        threading._shutdown()  # the non-daemon threads, as the interpreter's exit
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (AttributeError, OSError, ValueError):
            pass
    os._exit(code)
