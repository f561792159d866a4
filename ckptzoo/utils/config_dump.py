"""Where a training run saves its merged config, without overwriting the config it was read from.

mmdet 2.x's tools/train.py writes ``<work_dir>/<config file name>``; with ``--work-dir .`` next
to the config (or a ``_base_`` file kept in the work dir) that is the user's own file, which it
overwrote with the merged dump. Here that name is kept unless it is one of the source files;
then the dump is ``<work_dir>/<timestamp>.py`` (mmengine's name for a config dump without a file
name), beside the run's ``<timestamp>.log``.
"""
import os.path as osp

from mmengine.config import Config

__all__ = ['config_source_files', 'config_dump_path']


def config_source_files(filename):
    """Real paths of ``filename`` and of every ``_base_`` file it inherits, recursively."""
    found, todo = set(), [filename]
    while todo:
        path = todo.pop()
        real = osp.realpath(path)
        if real in found or not osp.isfile(path):
            continue
        found.add(real)
        try:
            bases = Config._get_base_files(path)
        except Exception:  # Config.fromfile has already read it; a base it cannot list is none
            continue
        for base in bases:
            todo.append(Config._get_cfg_path(base, path)[0])
    return found


def _is_source(path, sources):
    if osp.realpath(path) in sources:
        return True
    return osp.exists(path) and any(osp.samefile(path, s) for s in sources)  # hard links


def config_dump_path(config_file, work_dir, timestamp):
    """``(path, source)``: the file to dump the merged config to, and the source file its usual
    name would have overwritten (None when the usual name is free of sources)."""
    sources = config_source_files(config_file)
    usual = osp.join(work_dir, osp.basename(config_file))
    if not _is_source(usual, sources):
        return usual, None
    fallback = osp.join(work_dir, timestamp + osp.splitext(config_file)[1])
    if _is_source(fallback, sources):
        raise FileExistsError(f'cannot save the merged config in {work_dir!r}: both '
                              f'{usual!r} and {fallback!r} are files the config {config_file!r} '
                              f'is read from; choose another --work-dir')
    return fallback, usual
