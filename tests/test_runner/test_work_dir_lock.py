"""One run per work dir: the lock's refusal, stale takeover, release and forked children.
(Whole tools/train.py runs against one work dir: tests/test_tools/test_faults.py.)"""
import errno
import json
import os
import socket

import pytest

from ckptzoo.runner import work_dir_lock
from ckptzoo.runner.work_dir_lock import LOCK_NAME, WorkDirLock, WorkDirLocked, lock_work_dir


def _holder_process(work_dir):
    """A forked process that takes the lock and keeps it until the returned pipe is closed."""
    ready_r, ready_w = os.pipe()
    stop_r, stop_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.close(stop_w)
            lock = WorkDirLock(work_dir).acquire()
            os.write(ready_w, b'1')
            os.read(stop_r, 1)
            lock.release()
            code = 0
        finally:
            os._exit(code)
    os.close(stop_r)
    assert os.read(ready_r, 1) == b'1'
    os.close(ready_r)
    return pid, stop_w


def _refusal_in_another_process(work_dir):
    """What a forked process taking the lock is told ('' when it gets it)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            WorkDirLock(work_dir).acquire().release()
            os.write(w, b'')
        except WorkDirLocked as exc:
            os.write(w, str(exc).encode())
        finally:
            os._exit(0)
    os.close(w)
    os.waitpid(pid, 0)
    with os.fdopen(r) as f:
        return f.read()


def _dead_pid():
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    return pid


def test_a_second_run_is_refused_naming_the_holder(tmp_path):
    pid, stop = _holder_process(tmp_path / 'w')
    try:
        with pytest.raises(WorkDirLocked) as err:
            lock_work_dir(str(tmp_path / 'w'))
    finally:
        os.close(stop)
        os.waitpid(pid, 0)
    msg = str(err.value)
    assert f'work dir {tmp_path / "w"} is in use by another training run (pid {pid} on host ' \
           f'{socket.gethostname()!r}, started ' in msg
    assert 'Wait for that run to end, give this one another --work-dir' in msg
    assert f'delete {tmp_path / "w" / LOCK_NAME}' in msg
    # the holder ended: its lock file is gone, the work dir is free
    assert not (tmp_path / 'w' / LOCK_NAME).exists()
    lock_work_dir(str(tmp_path / 'w')).release()


def test_a_stale_lock_of_a_dead_pid_is_taken_over_with_a_warning(tmp_path):
    dead = _dead_pid()
    (tmp_path / LOCK_NAME).write_text(json.dumps(dict(
        pid=dead, host=socket.gethostname(), started='2024-01-01 00:00:00 +0000',
        command='python tools/train.py cfg.py')))
    with pytest.warns(UserWarning, match=rf'took over the lock of a run that is no longer '
                                         rf'running \(pid {dead} on host .*started 2024-01-01'):
        lock = lock_work_dir(str(tmp_path))
    holder = json.loads((tmp_path / LOCK_NAME).read_text())
    assert holder['pid'] == os.getpid() and holder['host'] == socket.gethostname()
    lock.release()
    assert not (tmp_path / LOCK_NAME).exists()


def test_without_flock_the_record_decides(tmp_path, monkeypatch):
    """A file system without flock: a dead pid on this host is stale; a live one, or a lock
    written on another host, is refused (with how to remove it)."""
    def no_flock(fd, op):
        raise OSError(errno.ENOLCK, 'No locks available')

    monkeypatch.setattr(work_dir_lock.fcntl, 'flock', no_flock)
    path = tmp_path / LOCK_NAME
    path.write_text(json.dumps(dict(pid=os.getppid(), host=socket.gethostname())))
    with pytest.raises(WorkDirLocked, match=rf'pid {os.getppid()} on host'):
        WorkDirLock(tmp_path).acquire()
    path.write_text(json.dumps(dict(pid=12345, host='node-17')))
    with pytest.raises(WorkDirLocked, match=r"pid 12345 on host 'node-17'\); the lock was "
                                            r'written on another host.*delete '):
        WorkDirLock(tmp_path).acquire()
    dead = _dead_pid()
    path.write_text(json.dumps(dict(pid=dead, host=socket.gethostname())))
    with pytest.warns(UserWarning, match=rf'pid {dead} is not running on this host'):
        WorkDirLock(tmp_path).acquire().release()
    assert not path.exists()


def test_a_forked_child_does_not_release_the_lock(tmp_path):
    lock = WorkDirLock(tmp_path).acquire()
    try:
        pid = os.fork()
        if pid == 0:  # a loader worker or pool process ending: release() is not its to do
            lock.release()
            os._exit(0)
        os.waitpid(pid, 0)
        assert (tmp_path / LOCK_NAME).exists()
        # another process still cannot take it
        assert f'pid {os.getpid()} on host' in _refusal_in_another_process(tmp_path)
    finally:
        lock.release()
    assert not (tmp_path / LOCK_NAME).exists()
    assert _refusal_in_another_process(tmp_path) == ''


def test_released_on_an_exception_and_held_once_per_process(tmp_path):
    with pytest.raises(ZeroDivisionError):
        with WorkDirLock(tmp_path):
            assert lock_work_dir(str(tmp_path)) is None  # the run holds it already
            1 / 0
    assert not (tmp_path / LOCK_NAME).exists()
