"""A run's own directory: paths checked once when a run starts, and the rule that a run
deletes files only in its own directories (a path recorded in a checkpoint may belong to
another run: the one resumed from, or the original of a copied work dir)."""
import os
import os.path as osp

__all__ = ['expand_path', 'check_work_dir', 'in_directory', 'unwritable']


def expand_path(path, name, what='a file path'):
    """``path`` with ``~`` expanded (as mmcv's local checkpoint loader does); an empty one is
    an error naming ``name``."""
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f'{name} must be {what} (a str), got {type(path).__name__} {path!r}')
    path = os.fspath(path)
    if not path.strip():
        raise ValueError(f'{name} is empty ({path!r}): give {what}')
    return osp.expanduser(path)


def check_work_dir(work_dir, name='work_dir'):
    """The work dir with ``~`` expanded (not a literal ``./~`` folder); an empty one is an
    error: it would put the logs and checkpoints into the current directory."""
    return expand_path(work_dir, name, 'the directory for the logs and checkpoints of the run '
                       '(an empty one would write them into the current directory)')


def in_directory(path, directory):
    """Whether ``path`` is a file directly in ``directory``, comparing real paths."""
    if not path or not directory:
        return False
    parent = osp.dirname(osp.abspath(osp.expanduser(os.fspath(path))))
    return osp.realpath(parent) == osp.realpath(osp.expanduser(os.fspath(directory)))


def unwritable(path):
    """Why the file ``path`` cannot be written (None when it can), checked before the work
    that ends in writing it: a directory of that name, a missing folder, no permission."""
    path = os.fspath(path)
    folder = osp.dirname(osp.abspath(path))
    if osp.isdir(path):
        return 'it is a directory'
    if not osp.isdir(folder):
        return f'the folder {folder} does not exist'
    if not os.access(folder, os.W_OK) or (osp.exists(path) and not os.access(path, os.W_OK)):
        return 'permission denied'
    return None
