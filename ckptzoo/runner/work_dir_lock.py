"""One training run per work dir at a time.

Two runs writing into one work dir delete and overwrite each other's checkpoints (rotation,
``latest.pth``, ``preempted_iter_*.pth``) with no error. A run therefore holds its work dir
while it runs: ``<work_dir>/.ckptzoo.lock`` is taken before anything is written there, with
``flock`` on an open descriptor (the kernel releases it when the holder dies, kill -9 included)
and, for the message, the holder's pid, host, start time and command line inside.

* A second run finds the lock held and stops at once, naming the work dir and the holder.
* A lock file whose ``flock`` is free is stale (its holder died): it is taken over with a
  warning naming the old holder. On a file system without ``flock`` (some network mounts) the
  content decides: a holder pid that is not alive on this host is stale; a lock written on
  another host is refused, with how to remove it.
* The lock is released (the file removed) when the run ends, also on an exception or a
  preemption; only by the process that took it, never by a forked child (a loader worker, a
  ``multiprocessing`` pool) that inherited the descriptor.
* Under torch.distributed rank 0 takes it for all ranks and tells them the outcome, so a
  refused run stops every rank (none waits in a collective).
"""
import errno
import json
import os
import os.path as osp
import socket
import sys
import time
import warnings

try:
    import fcntl
except ImportError:  # pragma: no cover (Windows)
    fcntl = None

__all__ = ['LOCK_NAME', 'WorkDirLocked', 'WorkDirLock', 'lock_work_dir']

LOCK_NAME = '.ckptzoo.lock'
_NO_FLOCK = (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL)
_held = {}  # real path of the work dir -> the WorkDirLock this process holds on it


class WorkDirLocked(RuntimeError):
    """Another run holds the work dir: the message names it, the holder and what to do."""


def _pid_alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, another user's
        return True
    return True


def _describe(holder):
    if not holder:
        return 'a run whose lock file is still being written (or is empty)'
    parts = [f"pid {holder.get('pid')} on host {holder.get('host')!r}"]
    if holder.get('started'):
        parts.append(f"started {holder['started']}")
    if holder.get('command'):
        parts.append(f"command: {holder['command']}")
    return ', '.join(parts)


def _read(fd):
    os.lseek(fd, 0, os.SEEK_SET)
    raw = b''
    while True:
        chunk = os.read(fd, 65536)
        if not chunk:
            break
        raw += chunk
    try:
        holder = json.loads(raw.decode())
    except (UnicodeDecodeError, ValueError):
        return {}
    return holder if isinstance(holder, dict) else {}


class WorkDirLock:
    """The lock of one work dir, held by this process between :meth:`acquire` and
    :meth:`release` (a context manager too)."""

    def __init__(self, work_dir):
        self.work_dir = osp.abspath(osp.expanduser(os.fspath(work_dir)))
        self.path = osp.join(self.work_dir, LOCK_NAME)
        self.fd = None
        self.pid = None
        self.flocked = False

    def _refuse(self, holder, reason):
        raise WorkDirLocked(
            f'work dir {self.work_dir} is in use by another training run ({_describe(holder)})'
            f'{reason}: two runs in one work dir overwrite and delete each other\'s '
            f'checkpoints. Wait for that run to end, give this one another --work-dir, or, if '
            f'that run is no longer running, delete {self.path} and start again')

    def acquire(self):
        """Take the lock, or raise :class:`WorkDirLocked`. Creates the work dir (only it)."""
        key = osp.realpath(self.work_dir) if osp.isdir(self.work_dir) else self.work_dir
        if _held.get(key) is not None and _held[key].pid == os.getpid():
            raise WorkDirLocked(f'work dir {self.work_dir} is already held by this process '
                                f'(pid {os.getpid()}): one run per work dir')
        os.makedirs(self.work_dir, exist_ok=True)
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | getattr(os, 'O_CLOEXEC', 0),
                         0o644)
            try:
                stale = self._lock(fd)
                if os.path.exists(self.path) and \
                        os.fstat(fd).st_ino == os.stat(self.path).st_ino:
                    break
            except BaseException:
                os.close(fd)
                raise
            os.close(fd)  # removed or replaced by its holder meanwhile: lock the new file
        self.fd, self.pid = fd, os.getpid()
        me = dict(pid=self.pid, host=socket.gethostname(),
                  started=time.strftime('%Y-%m-%d %H:%M:%S %z'),
                  command=' '.join([osp.basename(sys.executable)] + sys.argv))
        os.ftruncate(fd, 0)
        os.lseek(fd, 0, os.SEEK_SET)
        os.write(fd, (json.dumps(me, indent=1) + '\n').encode())
        os.fsync(fd)
        _held[osp.realpath(self.work_dir)] = self
        if stale:
            warnings.warn(f'work dir {self.work_dir}: took over the lock of a run that is no '
                          f'longer running ({_describe(stale)}); {stale.get("_why")}',
                          UserWarning)
        return self

    def _lock(self, fd):
        """Lock ``fd``'s file; the previous holder's record when the lock was stale."""
        holder = _read(fd)
        here = socket.gethostname()
        if fcntl is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                if holder.get('host') == here and isinstance(holder.get('pid'), int) \
                        and not _pid_alive(holder['pid']):
                    self._refuse(holder, '; that pid is no longer running, but a process it '
                                 'started (a data loader worker, a pool) still holds the lock '
                                 'open: end it')
                self._refuse(holder, '')
            except OSError as exc:
                if exc.errno not in _NO_FLOCK:
                    raise
            else:
                self.flocked = True
                holder = _read(fd)  # written by a holder that has just released it?
                if holder:
                    holder['_why'] = 'it ended without releasing it (killed, or crashed)'
                return holder or None
        # no flock on this file system: the record decides
        if not holder:
            return None
        pid = holder.get('pid')
        if holder.get('host') != here:
            self._refuse(holder, f'; the lock was written on another host and this file system '
                         f'cannot tell whether that run still holds it')
        if isinstance(pid, int) and pid != os.getpid() and _pid_alive(pid):
            self._refuse(holder, '')
        holder['_why'] = f'pid {pid} is not running on this host'
        return holder

    def release(self):
        """Remove the lock file and let go; a no-op in any process but the one that took it
        (a forked child inherits the descriptor, not the lock's ownership)."""
        if self.fd is None or os.getpid() != self.pid:
            return
        try:
            if _held.get(osp.realpath(self.work_dir)) is self:
                del _held[osp.realpath(self.work_dir)]
            try:
                if os.fstat(self.fd).st_ino == os.stat(self.path).st_ino:
                    os.remove(self.path)  # while still locked: nobody takes a dying file
            except FileNotFoundError:
                pass
        finally:
            os.close(self.fd)  # releases the flock
            self.fd = None

    def __enter__(self):
        return self.acquire()

    def __exit__(self, *exc):
        self.release()
        return False


def lock_work_dir(work_dir, distributed=False):
    """Take the lock of ``work_dir`` for this run: a :class:`WorkDirLock` on rank 0 (release it
    when the run ends), None on the other ranks and when this process holds it already. Under
    torch.distributed a collective: rank 0 tries, then every rank raises :class:`WorkDirLocked`
    if it failed."""
    rank = 0
    if distributed:
        import torch.distributed as dist
        rank = dist.get_rank()
    lock, error = None, None
    if rank == 0:
        held = _held.get(osp.realpath(osp.abspath(osp.expanduser(os.fspath(work_dir)))))
        try:
            if held is None or held.pid != os.getpid():  # else held by this run already
                lock = WorkDirLock(work_dir).acquire()
        except WorkDirLocked as exc:
            error = str(exc)
    if distributed:  # every rank learns the outcome: none waits for a rank that stopped
        shared = [error]
        dist.broadcast_object_list(shared, src=0)
        error = shared[0]
    if error is not None:
        raise WorkDirLocked(error)
    return lock
