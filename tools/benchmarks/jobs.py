"""A benchmark's job in a process of its own, so that its memory (the CUDA allocator's
statistics, the live tensors) is its own: the driver runs ``python SCRIPT ARGS --result FILE``
(:func:`spawn`); the job writes its result, a dict with ``ok`` (and ``error`` when it failed),
to ``FILE`` (:func:`write_result`). A job that dies without writing one is a failed row too."""
import json
import os
import subprocess
import sys
import tempfile
import traceback


def write_result(path, job):
    """Run ``job()`` (a dict of figures), write it to ``path`` with ``ok``; an exception is a
    result too (``ok=False`` and its first line), so that one failed job costs one row."""
    try:
        result = job()
        result['ok'] = True
    except Exception as exc:  # reported as a FAILED row by the driver
        traceback.print_exc()
        result = dict(ok=False, error=f'{type(exc).__name__}: {exc}'.splitlines()[0][:300])
    with open(path, 'w', encoding='utf-8') as f:
        json.dump(result, f)
    return 0 if result['ok'] else 1


def spawn(script, argv, root):
    """``(result, completed process)`` of ``python script *argv --result TMP`` with ``root``
    on ``PYTHONPATH``; a job that wrote nothing gives ``ok=False`` and its last stderr line."""
    fd, path = tempfile.mkstemp(suffix='.json', prefix='ckptzoo_job_')
    os.close(fd)
    try:
        proc = subprocess.run([sys.executable, script, *argv, '--result', path],
                              capture_output=True, text=True, env=dict(
                                  os.environ, PYTHONPATH=root + os.pathsep +
                                  os.environ.get('PYTHONPATH', '')))
        try:
            with open(path, encoding='utf-8') as f:
                result = json.load(f)
        except (OSError, ValueError):
            lines = [ln for ln in (proc.stderr or '').strip().splitlines() if ln.strip()]
            reason = lines[-1] if lines else f'exit status {proc.returncode}'
            result = dict(ok=False, error=f'process died: {reason}'[:300])
    finally:
        os.unlink(path)
    return result, proc
