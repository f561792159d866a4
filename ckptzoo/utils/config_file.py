"""Which config file a model is being built from, for the few arguments mmdet configs give as
paths relative to the repository (``teacher_config='configs/gfl/...'`` of the LD configs):
:func:`building_from` marks the build, :func:`current_config_file` reads it."""
import contextvars
import os
import os.path as osp
from contextlib import contextmanager

__all__ = ['building_from', 'current_config_file']

_CONFIG_FILE = contextvars.ContextVar('ckptzoo_config_file', default=None)


@contextmanager
def building_from(filename):
    """Within the block, :func:`current_config_file` is ``filename`` (absolute; None leaves
    the block unmarked)."""
    token = _CONFIG_FILE.set(osp.abspath(os.fspath(filename)) if filename else None)
    try:
        yield
    finally:
        _CONFIG_FILE.reset(token)


def current_config_file():
    """The config file of the model being built, or None."""
    return _CONFIG_FILE.get()
