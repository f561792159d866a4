"""Near misses: a top-level key of a config file that is one edit away from a known key
(``runer``, ``evalution``) is warned about, naming the file that sets it. It may be a variable
of the file (mmdet 2.x config files use the top level as a namespace), so it is not an error."""
from __future__ import annotations

import ast
import difflib
import os.path as osp
import warnings

from .schema import KNOWN_KEYS

__all__ = ['near_miss', 'warn_near_misses']


def warn_near_misses(cfg):
    """Warn for a top-level key of the file that looks like a misspelt known key
    (:func:`near_miss`), naming the file that sets it: it may be a variable, so it is not an
    error, but a misspelt ``runner`` would otherwise train on the defaults unnoticed."""
    filename = getattr(cfg, 'filename', None)
    for key in cfg:
        if key in KNOWN_KEYS:
            continue
        close = near_miss(key)
        if close:
            where = f' in {_defining_file(filename, key)}' if filename else ''
            warnings.warn(f'config key {key!r}{where} is not read by ckptzoo, so its value is '
                          f'ignored (unless it is a variable that other keys use); did you '
                          f'mean {close!r}?')


def near_miss(key: str) -> str | None:
    """The known top-level key that ``key`` is one edit away from (a letter dropped, added,
    changed, or two swapped: ``runer``, ``optimzer``, ``worklfow``) or very close to
    (difflib ratio >= 0.85), else None. No top-level variable of mmdet 2.28.2's config files
    (``data_root``, ``img_norm_cfg``, ``train_pipeline``, ``checkpoint``, ...) is that close."""
    if len(key) >= 4:
        for known in sorted(KNOWN_KEYS):
            if _one_edit(key, known):
                return known
    close = difflib.get_close_matches(key, sorted(KNOWN_KEYS), n=1, cutoff=0.85)
    return close[0] if close else None


def _one_edit(a: str, b: str) -> bool:
    """Whether ``a`` and ``b`` differ by one insertion, deletion, substitution or swap of two
    adjacent letters (Damerau-Levenshtein distance 1)."""
    if a == b or abs(len(a) - len(b)) > 1:
        return False
    if len(a) > len(b):
        a, b = b, a
    i = next((k for k in range(len(a)) if a[k] != b[k]), len(a))
    if len(a) < len(b):
        return a[i:] == b[i + 1:]
    return a[i + 1:] == b[i + 1:] or (i + 1 < len(a) and a[i] == b[i + 1] and
                                      a[i + 1] == b[i] and a[i + 2:] == b[i + 2:])


def _defining_file(filename: str, key: str) -> str:
    """The config file that sets the top-level ``key``: ``filename`` itself, else the
    ``_base_`` file (searched depth first, as mmengine merges them) that does; ``filename``
    when it cannot be told."""
    return _setter(osp.abspath(filename), key, set()) or filename


def _setter(path, key, seen):
    if path in seen:
        return None
    seen.add(path)
    try:
        with open(path, encoding='utf-8') as f:
            tree = ast.parse(f.read())
    except (OSError, SyntaxError, ValueError):
        return None
    bases = []
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else \
            [node.target] if isinstance(node, (ast.AnnAssign, ast.AugAssign)) else []
        names = [t.id for t in targets if isinstance(t, ast.Name)]
        if key in names:
            return path
        if '_base_' in names:
            try:
                value = ast.literal_eval(node.value)
            except ValueError:
                continue
            bases = [value] if isinstance(value, str) else list(value)
    for base in bases:
        if isinstance(base, str) and '::' not in base:  # not a package's (mmdet::...)
            found = _setter(osp.abspath(osp.join(osp.dirname(path), base)), key, seen)
            if found:
                return found
    return None
