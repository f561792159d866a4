"""Checkpoint files: resolving names offline, loading safely, saving atomically.

Nothing downloads at run time: ``torchvision://resnet50``, ``open-mmlab://NAME`` (also
``openmmlab://``; mmcv 1.x's deprecated names are followed, with a warning), ``mmcls://NAME``
and URLs are looked up in the local torch hub cache, where mmcv 1.x downloaded them, and fail
with a message saying where to put the file. ``mmcls://`` checkpoints are mmcls classifiers:
as in mmcv, only their ``backbone.`` weights are loaded, without the prefix. Loading uses
``torch.load(weights_only=True)``; saving writes a temporary file and renames it, so a crash
during a save never corrupts the last good checkpoint, and a full disk fails with the path and
the bytes needed.
"""
import difflib
import errno
import glob
import os
import os.path as osp
import pickle
import re
import shutil
import tempfile
import warnings
from collections import OrderedDict
from urllib.parse import urlparse

import torch
from mmengine.runner.checkpoint import (_get_mmengine_home, get_deprecated_model_names,
                                        get_external_models, get_mmcls_models,
                                        get_torchvision_models)

from .checkpoint_match import load_state_dict
from .utils import unwrap_model

__all__ = ['resolve_checkpoint_path', 'load_file', 'load_checkpoint', 'save_checkpoint',
           'weights_to_cpu', 'get_state_dict', 'find_latest_checkpoint', 'model_state_dict']

_TMP_PREFIX = '.tmp_'


def _hub_file(url):
    return osp.join(torch.hub.get_dir(), 'checkpoints', osp.basename(urlparse(url).path))


_OPENMMLAB_PREFIXES = ('open-mmlab://', 'openmmlab://')


def _model_zoo_url(filename):
    """The URL (or mmengine-home path) a model-zoo name stands for, or None for other names."""
    if filename.startswith('torchvision://'):
        name, urls, zoo = filename[len('torchvision://'):], get_torchvision_models(), 'torchvision'
    elif filename.startswith('mmcls://'):
        name, urls, zoo = filename[len('mmcls://'):], get_mmcls_models(), 'mmcls'
    elif filename.startswith(_OPENMMLAB_PREFIXES):
        prefix = next(p for p in _OPENMMLAB_PREFIXES if filename.startswith(p))
        name, urls, zoo = filename[len(prefix):], get_external_models(), 'OpenMMLab'
        deprecated = get_deprecated_model_names()
        if name in deprecated:
            warnings.warn(f'{prefix}{name} is deprecated in favor of {prefix}{deprecated[name]}')
            name = deprecated[name]
    else:
        return None
    if name not in urls:
        close = difflib.get_close_matches(name, list(urls), n=5, cutoff=0.5)
        hint = f'did you mean {", ".join(close)}?' if close else f'known: {", ".join(sorted(urls))}'
        raise ValueError(f'unknown {zoo} model {name!r} in {filename!r}; {hint}')
    url = urls[name]
    if not url.startswith(('http://', 'https://')):
        return osp.join(_get_mmengine_home(), url)  # a file shipped next to mmengine's cache
    return url


def resolve_checkpoint_path(filename):
    """A local path for ``filename``: a path, a model-zoo name (``torchvision://``,
    ``open-mmlab://``, ``openmmlab://``, ``mmcls://``) or an http(s) URL."""
    if not isinstance(filename, (str, os.PathLike)):
        raise TypeError(f'checkpoint must be a path or a URL string, got {filename!r}')
    filename = os.fspath(filename)
    name = filename
    url = _model_zoo_url(filename)
    if url is not None:
        filename = url
    if filename.startswith(('http://', 'https://')):
        path = _hub_file(filename)
        if not osp.isfile(path):
            what = filename if name == filename else f'{name} ({filename})'
            raise FileNotFoundError(
                f'{what} is not in the local torch hub cache and ckptzoo downloads nothing '
                f'at run time: download it on a machine with internet access and put it at '
                f'{path} (or give a local path instead)')
        return path
    filename = osp.expanduser(filename)  # as mmcv's load_from_local
    if not osp.isfile(filename):
        what = filename if name == filename else f'{name} ({filename})'
        raise FileNotFoundError(f'checkpoint file not found: {what}')
    return filename


def _mmcls_backbone(checkpoint):
    """mmcv's processing of ``mmcls://`` checkpoints: the ``backbone.`` weights, unprefixed."""
    state_dict = checkpoint.get('state_dict', checkpoint)
    return dict(state_dict=OrderedDict((k[len('backbone.'):], v) for k, v in state_dict.items()
                                       if k.startswith('backbone.')))


def load_file(filename, map_location='cpu'):
    """``torch.load`` with ``weights_only=True``; errors name the file. As mmcv's
    ``_load_checkpoint``, an ``mmcls://`` checkpoint comes back as its backbone's state dict."""
    path = resolve_checkpoint_path(filename)
    try:
        checkpoint = torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as e:
        raise RuntimeError(
            f'checkpoint {path} is corrupt, or holds objects other than tensors and plain '
            f'containers (refused by torch.load(weights_only=True)): {e}') from e
    except Exception as e:  # the unpickler raises anything from IndexError to EOFError
        raise RuntimeError(f'checkpoint {path} is corrupt or not a torch checkpoint: {e}') from e
    if isinstance(filename, str) and filename.startswith('mmcls://') \
            and isinstance(checkpoint, dict):
        checkpoint = _mmcls_backbone(checkpoint)
    return checkpoint


def get_state_dict(module):
    """The state dict of ``module``, unwrapping DataParallel / DistributedDataParallel."""
    return unwrap_model(module).state_dict()


def model_state_dict(checkpoint, filename, revise_keys=((r'^module\.', ''),), prefix=None):
    """The model weights of a loaded ``checkpoint``: a bare state dict or a dict with
    ``state_dict`` / ``model``; ``revise_keys`` are (pattern, replacement) pairs applied to
    every key, by default stripping DDP's ``module.``. ``prefix`` (e.g. ``'backbone'``) keeps
    only the keys under it, without it (mmcv's ``Pretrained(prefix=...)``)."""
    if not isinstance(checkpoint, dict):
        raise RuntimeError(f'no state dict in checkpoint {filename}: got {type(checkpoint)}')
    state_dict = checkpoint.get('state_dict', checkpoint.get('model', checkpoint))
    metadata = getattr(state_dict, '_metadata', OrderedDict())
    for pattern, repl in revise_keys:
        state_dict = OrderedDict((re.sub(pattern, repl, k), v) for k, v in state_dict.items())
    if prefix:
        head = prefix.rstrip('.') + '.'
        state_dict = OrderedDict((k[len(head):], v) for k, v in state_dict.items()
                                 if k.startswith(head))
        if not state_dict:
            raise KeyError(f'no key starts with prefix {prefix!r} in checkpoint {filename}')
    state_dict._metadata = metadata
    return state_dict


def load_checkpoint(model, filename, map_location='cpu', strict=False, logger=None,
                    revise_keys=((r'^module\.', ''),), prefix=None, complete=False):
    """Load ``filename`` into ``model`` and return the whole checkpoint dict.

    The checkpoint is compared with the model before anything is copied
    (:mod:`.checkpoint_match`): ``strict=True`` needs the same keys and shapes; ``complete=True``
    (testing a trained model) needs every tensor of the model, keys the model lacks are warned
    about; ``strict=False`` (mmcv's default, for fine-tuning) warns about missing and
    unexpected keys and shape mismatches (those tensors keep their values) and refuses a
    checkpoint from which fewer than half of the model's tensors load. Mismatches raise
    :class:`~.checkpoint_match.CheckpointMismatch` naming the file and the keys.
    ``revise_keys`` and ``prefix``: see :func:`model_state_dict`.
    """
    checkpoint = load_file(filename, map_location)
    state_dict = model_state_dict(checkpoint, filename, revise_keys, prefix)
    load_state_dict(unwrap_model(model), state_dict, filename, strict=strict,
                    complete=complete, logger=logger)
    return checkpoint


def weights_to_cpu(state_dict):
    out = OrderedDict((k, v.detach().cpu() if torch.is_tensor(v) else v)
                      for k, v in state_dict.items())
    out._metadata = getattr(state_dict, '_metadata', OrderedDict())
    return out


def save_checkpoint(checkpoint, filename):
    """Write ``checkpoint`` (a dict) to ``filename`` atomically: temporary file, then rename.

    A full disk (ENOSPC, EDQUOT) raises ``OSError`` naming the file, the bytes it needs and the
    bytes free; the temporary file is removed and the previous files are untouched. torch's zip
    writer reports a full disk as ``RuntimeError: [enforce fail at inline_container.cc:...]``;
    that one becomes the same ``OSError`` (other RuntimeErrors are raised as they are).
    """
    dirname = osp.dirname(osp.abspath(filename))
    os.makedirs(dirname, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=_TMP_PREFIX, suffix='.pth', dir=dirname)
    try:
        with os.fdopen(fd, 'wb') as f:
            torch.save(checkpoint, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, filename)
    except (OSError, RuntimeError) as e:
        code = _full_disk_errno(e, tmp, dirname, checkpoint)
        if osp.exists(tmp):
            os.remove(tmp)
        if code is None:
            raise
        needed = _tensor_bytes(checkpoint)
        free = shutil.disk_usage(dirname).free
        raise OSError(code, f'{os.strerror(code)} while saving checkpoint {filename}: it '
                      f'needs at least {_size(needed)} of tensors, {_size(free)} are free in '
                      f'{dirname}. The checkpoints saved before are intact: free some space, '
                      'then continue with --auto-resume', filename) from e
    except BaseException:
        if osp.exists(tmp):
            os.remove(tmp)
        raise


_FULL = (errno.ENOSPC, errno.EDQUOT)
_WRITER_ERRORS = ('inline_container', 'PytorchStreamWriter')


def point_latest(out_dir, filename, checkpoint):
    """Point ``out_dir/latest.pth`` at ``filename`` (a file in ``out_dir``) atomically: a
    symlink renamed over the old one, or, where the file system has no symlinks, a copy of
    ``checkpoint`` written as every checkpoint is."""
    latest = osp.join(out_dir, 'latest.pth')
    tmp_link = osp.join(out_dir, f'.latest.{os.getpid()}.tmp')
    try:
        if osp.lexists(tmp_link):
            os.remove(tmp_link)
        os.symlink(filename, tmp_link)
        os.replace(tmp_link, latest)
    except OSError:
        save_checkpoint(checkpoint, latest)


def _full_disk_errno(exc, tmp, dirname, checkpoint):
    """ENOSPC / EDQUOT when ``exc`` means the disk (or quota) is full, else None.

    An ``OSError`` says so by its errno, also as the cause / context of torch's writer error
    (the writer calls the file's ``write``). A writer error without one is a full disk when,
    with the partial file still there, less is free than the rest of the tensors plus 1 MiB.
    """
    chain, link = [], exc
    while link is not None and link not in chain:
        chain.append(link)
        link = link.__cause__ or link.__context__
    for link in chain:
        if isinstance(link, OSError) and link.errno is not None:
            return link.errno if link.errno in _FULL else None
    if not isinstance(exc, RuntimeError) or not any(m in str(exc) for m in _WRITER_ERRORS):
        return None
    written = osp.getsize(tmp) if osp.exists(tmp) else 0
    rest = max(_tensor_bytes(checkpoint) - written, 0)
    return errno.ENOSPC if shutil.disk_usage(dirname).free < rest + 2**20 else None


def _size(n):
    return f'{n} bytes' + (f' ({n / 2**20:.1f} MiB)' if n >= 2**20 else '')


def _tensor_bytes(obj, seen=None):
    """Bytes of the tensor storages in ``obj`` (dicts, lists, tuples), each storage once."""
    seen = set() if seen is None else seen
    if torch.is_tensor(obj):
        storage = obj.untyped_storage()
        key = (obj.device, storage.data_ptr())
        if key in seen:
            return 0
        seen.add(key)
        return storage.nbytes()
    if isinstance(obj, dict):
        return sum(_tensor_bytes(v, seen) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return sum(_tensor_bytes(v, seen) for v in obj)
    return 0


def find_latest_checkpoint(path, suffix='pth'):
    """The checkpoint ``--auto-resume`` continues from, or None (mmdet 2.x's signature).

    ``latest.<suffix>`` when it points to a file (it moves only after a complete save), else the
    ``*_<N>.<suffix>`` with the largest N. Temporary files of an interrupted save
    (``.tmp_*.pth``) are never taken: a save renames its file into place only once it is
    complete and synced.
    """
    if not osp.isdir(path):
        return None
    stale = glob.glob(osp.join(path, _TMP_PREFIX + '*.' + suffix))
    if stale:
        warnings.warn(f'ignoring {len(stale)} temporary file(s) of an interrupted checkpoint '
                      f'save in {path} ({", ".join(sorted(map(osp.basename, stale)))}); '
                      'they can be deleted')
    latest = osp.join(path, f'latest.{suffix}')
    if osp.isfile(latest):  # follows the symlink: False when it dangles
        return latest
    best, best_n = None, -1
    for ckpt in glob.glob(osp.join(path, f'*.{suffix}')):  # glob skips hidden (temporary) files
        match = re.search(rf'_(\d+)\.{re.escape(suffix)}$', ckpt)
        if match and osp.isfile(ckpt) and int(match.group(1)) > best_n:
            best, best_n = ckpt, int(match.group(1))
    return best
