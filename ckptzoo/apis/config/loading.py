"""Loading a config file: :func:`load_config` (a file, its ``_base_`` files and
``--cfg-options``). A missing file, a ``_base_`` cycle, an import mmengine cannot read with
``_base_``, a syntax error or an exception fails naming the file (and the line); a
``--cfg-options`` key whose top level is not a known key fails (a new one is a typo, given with
its close matches; one that names a variable of the file changes nothing, and the message says
so). ``custom_imports`` are imported after the file is read, except the modules ckptzoo
provides itself (:data:`~ckptzoo.registry.PROVIDED_SCOPES`)."""
from __future__ import annotations

import ast
import difflib
import os.path as osp
import sys

from mmengine.config import Config
from mmengine.utils import import_modules_from_strings

from ...registry import PROVIDED_SCOPES, UnknownKeyError
from .schema import KNOWN_KEYS, ConfigError

__all__ = ['load_config', 'import_custom_modules']


def load_config(filename: str, cfg_options: dict | None = None) -> Config:
    """``Config.fromfile(filename)`` merged with ``cfg_options`` (``--cfg-options``).

    A missing file, a missing ``_base_`` file, a syntax error or an exception in any of them
    fails naming that file (and the line, and the file that named a ``_base_``): mmengine
    says ``SyntaxError: invalid syntax ('<unknown>', line 3)`` or ``NameError`` alone.
    ``custom_imports`` are imported (:func:`import_custom_modules`)."""
    filename = str(filename)
    if not osp.isfile(filename):
        raise FileNotFoundError(f'config file {filename!r} not found')
    _check_base_cycle(filename)  # mmengine recurses until RecursionError
    try:
        cfg = Config.fromfile(filename, import_custom_modules=False)
    except Exception as exc:
        _raise_on_imports(exc, filename)
        _raise_naming_file(exc, filename)  # always raises
    import_custom_modules(cfg, filename)
    if cfg_options:
        _check_cli_keys(cfg, cfg_options)
        cfg.merge_from_dict(cfg_options)
    return cfg


def import_custom_modules(cfg, filename=None):
    """Import ``cfg.custom_imports`` (mmengine's ``dict(imports=[...],
    allow_failed_imports=False)``), except the modules of the OpenMMLab packages whose models
    ckptzoo registers itself (:data:`~ckptzoo.registry.PROVIDED_SCOPES`): mmdet's configs
    import ``mmcls.models`` to register ``mmcls.ConvNeXt`` / ``mmcls.TIMMBackbone``, which are
    ckptzoo's own."""
    custom = cfg.get('custom_imports')
    if not custom:
        return
    if not isinstance(custom, dict) or 'imports' not in custom:
        raise ConfigError(f'custom_imports must be dict(imports=[module, ...], '
                          f'allow_failed_imports=False), got {custom!r}')
    imports = custom['imports']
    imports = [imports] if isinstance(imports, str) else list(imports)
    rest = [m for m in imports if not (isinstance(m, str)
                                       and m.split('.')[0] in PROVIDED_SCOPES)]
    if not rest:
        return
    try:
        import_modules_from_strings(rest, custom.get('allow_failed_imports', False))
    except ImportError as exc:
        where = f'config file {filename}: ' if filename else ''
        raise ImportError(f'{where}custom_imports {dict(custom)}: {exc} (the modules are '
                          f'looked for on sys.path: {sys.path}; set PYTHONPATH to include the '
                          f'folder of the package)') from exc


def _base_names(path):
    """The ``_base_`` entries of a config file (from its syntax tree, without running it)."""
    try:
        with open(path, encoding='utf-8') as f:
            tree = ast.parse(f.read(), path)
    except (OSError, SyntaxError, ValueError):
        return []  # mmengine reports it, naming the file
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == '_base_' for t in node.targets):
            value = node.value
            items = value.elts if isinstance(value, (ast.List, ast.Tuple)) else [value]
            return [item.value for item in items
                    if isinstance(item, ast.Constant) and isinstance(item.value, str)]
    return []


def _check_base_cycle(filename):
    """Raise :class:`ConfigError` naming the files of a ``_base_`` cycle (a.py -> b.py -> a.py)
    before mmengine follows it until ``RecursionError``."""
    done = set()

    def visit(path, chain):
        if path in chain:
            cycle = chain[chain.index(path):] + [path]
            raise ConfigError('_base_ files form a cycle: ' + ' -> '.join(cycle)
                              + ': a config cannot inherit from itself; remove one of these '
                              '_base_ entries')
        if path in done:
            return
        for name in _base_names(path):
            if '::' in name or '{{' in name:  # a package's config, a predefined variable
                continue
            base = osp.abspath(osp.join(osp.dirname(path), osp.expanduser(name)))
            if osp.isfile(base):
                visit(base, chain + [path])
        done.add(path)

    visit(osp.abspath(filename), [])


def _raise_on_imports(exc, filename):
    """mmengine reads a config that imports a module outside its own list of standard-library
    modules as a pure-Python ("lazy import") config, which cannot use ``_base_``; its error
    names neither the file nor the import."""
    if 'lazy_import' not in str(exc):
        return
    try:
        from mmengine.config.utils import _is_builtin_module
    except ImportError:  # pragma: no cover (another mmengine)
        return
    for path in reversed(_files_being_read(exc, filename)):
        try:
            with open(path, encoding='utf-8') as f:
                source = f.read()
            tree = ast.parse(source, path)
        except (OSError, SyntaxError, ValueError):
            continue
        for node in tree.body:
            if isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                modules = ['.' * node.level + node.module]
            else:
                continue
            for module in modules:
                if not _is_builtin_module(module):
                    text = ast.get_source_segment(source, node)
                    raise ConfigError(
                        f'config file {path}, line {node.lineno}: {text!r}: a config with '
                        f'_base_ can only import modules that mmengine counts as standard '
                        f'library, and it does not count {module!r} (an import of any other '
                        f'module makes mmengine read the file as a pure-Python config, '
                        f'which cannot inherit with _base_). Write the value itself instead '
                        f'of computing it with {module!r}, or move that code into a module '
                        f'loaded with custom_imports = dict(imports=[...])') from exc


def _files_being_read(exc, filename):
    """The config files mmengine was reading when ``exc`` was raised, outermost first (from
    the ``filename`` argument of its frames: it names none in the exception)."""
    files = []
    tb = exc.__traceback__
    while tb is not None:
        frame = tb.tb_frame
        path = frame.f_locals.get('filename')
        if 'mmengine' in frame.f_code.co_filename and isinstance(path, str) \
                and path.endswith('.py'):
            path = osp.abspath(path)
            if not files or files[-1] != path:
                files.append(path)
        tb = tb.tb_next
    return files or [osp.abspath(filename)]


def _raise_naming_file(exc, filename):
    files = _files_being_read(exc, filename)
    current = files[-1]
    named_by = f' (a _base_ of {files[-2]})' if len(files) > 1 else ''
    missing = getattr(exc, 'filename', None)
    if isinstance(exc, FileNotFoundError) and len(files) > 1 and isinstance(missing, str) \
            and osp.abspath(missing) == current:
        raise FileNotFoundError(f'_base_ file {osp.abspath(missing)!r} not found (named in '
                                f'{files[-2]})') from exc
    if isinstance(exc, SyntaxError):
        raise SyntaxError(f'{exc.msg} in config file {current}{named_by}',
                          (current, exc.lineno, exc.offset, exc.text)) from exc
    line = None
    tb = exc.__traceback__
    while tb is not None:  # the innermost frame of the config's own code gives the line
        if osp.abspath(tb.tb_frame.f_code.co_filename) == current:
            line = tb.tb_lineno
        tb = tb.tb_next
    where = f'{current}, line {line}' if line else current
    raise ConfigError(f'config file {where}{named_by}: {type(exc).__name__}: {exc}') from exc


def _check_cli_keys(cfg, cfg_options):
    for key in cfg_options:
        top = str(key).split('.')[0]
        if top in KNOWN_KEYS:
            continue
        if top in cfg:
            raise ConfigError(
                f'--cfg-options {key}: {top!r} is a variable of the config file, not a setting '
                f'ckptzoo reads: its value was used when the file was loaded, so changing it '
                f'now changes nothing; override the settings that use it instead')
        close = difflib.get_close_matches(top, sorted(KNOWN_KEYS), n=3, cutoff=0.6)
        hint = (f'did you mean {" or ".join(map(repr, close))}?' if close else
                f'known keys: {", ".join(sorted(KNOWN_KEYS))}')
        raise UnknownKeyError(f'unknown config key {top!r} (from --cfg-options {key}): '
                              f'no part of ckptzoo reads it; {hint}')
