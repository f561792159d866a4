"""The config as a training run reads it: :func:`load_config` (a file, its ``_base_`` files and
``--cfg-options``; errors name the file and line) and :func:`check_config` (every key against
the schema, and the values that would otherwise fail late), before anything is built.

mmengine's ``Config`` takes any key, so a typo (``--cfg-options runer.max_epochs=1``,
``data.samples_per_gpus=2``) used to add a key that nothing read, and the run trained on the
defaults. The schema is what ckptzoo reads: :data:`KNOWN_KEYS` at the top level; fixed sub-keys
for ``data``, ``log_config``, ``auto_scale_lr``, ...; and, for a dict built into a registered
class (``type=...``), that class's ``__init__`` signature
(:func:`ckptzoo.registry.accepted_args`). Hooks that take ``**kwargs`` for somewhere else check
them themselves (CheckpointHook: ``save_checkpoint``'s; EvalHook: ``dataset.evaluate``'s).

The top level of an mmdet 2.x config file is also a namespace of variables (``img_norm_cfg``,
``train_pipeline``, ``dataset_type``, ``data_root``, ``classes``, ...): an unknown top-level key
*in the file* is accepted (a warning naming the file that sets it when it is one edit away from
a known key, ``runer``, ``evalution``: :func:`near_miss`).
A top-level key given by ``--cfg-options`` is different: the file has been run, its variables
already used, so an override only has an effect where ckptzoo reads it. Any ``--cfg-options``
key whose top level is not a known key fails: a new one is a typo (with the close matches),
one that names a variable of the file changes nothing (the message says so).
"""
from __future__ import annotations

import ast
import difflib
import inspect
import os.path as osp
import warnings

from mmengine.config import Config

from ..registry import (DATASETS, HOOKS, MODELS, OPTIMIZERS, RUNNERS, TASK_UTILS, TRANSFORMS,
                        UnknownKeyError, check_type, accepted_args, check_keys)

__all__ = ['ConfigError', 'KNOWN_KEYS', 'load_config', 'check_config',
           'memory_check_interval', 'near_miss']


class ConfigError(ValueError):
    """A config that cannot train: the message names the file or the key."""


#: top-level keys ckptzoo (or mmengine, ``custom_imports``) reads; sub-keys are checked below
KNOWN_KEYS = frozenset((
    'model', 'train_cfg', 'test_cfg', 'data', 'optimizer', 'optimizer_config', 'fp16',
    'lr_config', 'momentum_config', 'runner', 'total_epochs', 'workflow', 'checkpoint_config',
    'log_config', 'custom_hooks', 'evaluation', 'auto_scale_lr', 'work_dir', 'load_from',
    'resume_from', 'auto_resume', 'seed', 'device', 'dist_params', 'log_level',
    'find_unused_parameters', 'cudnn_benchmark', 'opencv_num_threads', 'mp_start_method',
    'custom_imports', 'checkpoint_plan', 'checkpoint_segments', 'memory_budget',
    'memory_check_interval', 'synthetic_data'))

DATA_KEYS = ('samples_per_gpu', 'workers_per_gpu', 'persistent_workers', 'train', 'val', 'test',
             'train_dataloader', 'val_dataloader', 'test_dataloader')
LOG_CONFIG_KEYS = ('interval', 'hooks')
AUTO_SCALE_LR_KEYS = ('enable', 'base_batch_size')


# ------------------------------------------------------------------------------------------
# loading
# ------------------------------------------------------------------------------------------
def load_config(filename: str, cfg_options: dict | None = None) -> Config:
    """``Config.fromfile(filename)`` merged with ``cfg_options`` (``--cfg-options``).

    A missing file, a missing ``_base_`` file, a syntax error or an exception in any of them
    fails naming that file (and the line, and the file that named a ``_base_``): mmengine
    says ``SyntaxError: invalid syntax ('<unknown>', line 3)`` or ``NameError`` alone."""
    filename = str(filename)
    if not osp.isfile(filename):
        raise FileNotFoundError(f'config file {filename!r} not found')
    _check_base_cycle(filename)  # mmengine recurses until RecursionError
    try:
        cfg = Config.fromfile(filename)
    except Exception as exc:
        _raise_on_imports(exc, filename)
        _raise_naming_file(exc, filename)  # always raises
    if cfg_options:
        _check_cli_keys(cfg, cfg_options)
        cfg.merge_from_dict(cfg_options)
    return cfg


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


# ------------------------------------------------------------------------------------------
# checking
# ------------------------------------------------------------------------------------------
def check_config(cfg: Config, distributed: bool = False, validate: bool = True) -> None:
    """Check every key ckptzoo reads, and the values that would fail only later (batch and
    worker counts, schedule steps, hook arguments, evaluation metric), without building the
    model or the data: the one check of a training run's config (``tools/train.py`` calls
    it before anything is built). Without ``validate`` (``--no-validate``) ``evaluation`` is
    not used and not checked. Raises :class:`ConfigError` or ``UnknownKeyError``
    (``ckptzoo.registry``), ``UnknownTypeError`` for an unknown ``type``."""
    from ..runner import optimizer_constructor  # noqa: F401  (registers the constructor)
    from .. import datasets, models, runner  # noqa: F401  (fill the registries)
    _warn_near_misses(cfg)
    if cfg.get('model') is not None:
        _check_typed(cfg.model, 'model', (MODELS, ), (MODELS, TASK_UTILS))
    data = cfg.get('data')
    if data is not None:
        _check_data(data)
    if cfg.get('optimizer') is not None:
        _check_optimizer(cfg.optimizer)
    _check_optimizer_hook(cfg.get('optimizer_config'), cfg.get('fp16'), distributed)
    _check_schedule(cfg.get('lr_config'), 'LrUpdaterHook', 'lr_config')
    _check_schedule(cfg.get('momentum_config'), 'MomentumUpdaterHook', 'momentum_config')
    if cfg.get('runner') is not None:
        _check_typed(cfg.runner, 'runner', (RUNNERS, ))
    _check_hook(cfg.get('checkpoint_config'), 'checkpoint_config', 'CheckpointHook')
    _check_log_config(cfg.get('log_config'))
    hooks = cfg.get('custom_hooks') or []
    for i, hook in enumerate(hooks if isinstance(hooks, (list, tuple)) else [hooks]):
        if isinstance(hook, dict):
            _check_typed(hook, f'custom_hooks[{i}]', (HOOKS, ), extra=('priority', ))
    if validate and cfg.get('evaluation') is not None:
        _check_evaluation(cfg.evaluation, data.get('val') if data else None, distributed)
    _check_plain(cfg.get('auto_scale_lr'), AUTO_SCALE_LR_KEYS, 'auto_scale_lr')
    _check_dist_params(cfg.get('dist_params'))
    _check_synthetic_data(cfg.get('synthetic_data'))
    memory_check_interval(cfg)


def memory_check_interval(cfg: Config) -> int:
    """``memory_check_interval``: measure every Nth training step's peak memory on a CPU and
    log it as ``memory`` (CUDA logs it anyway); 0 (the default) is off."""
    value = cfg.get('memory_check_interval', 0)
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigError(f'memory_check_interval must be a non-negative int (0: off; N: '
                          f'measure the peak memory of every Nth training step on a CPU), got '
                          f'{value!r}')
    return value


def _warn_near_misses(cfg):
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


def _lookup(obj_type, registries):
    if inspect.isclass(obj_type):
        return obj_type
    for registry in registries:
        cls = registry.module_dict.get(obj_type) if isinstance(obj_type, str) else None
        if cls is not None:
            return cls
    return None


def _check_typed(cfg, path, registries, nested=None, extra=(), exclude=(), strict=False):
    """A dict built into a registered class: its keys are the class's arguments (``extra``
    added, ``exclude`` removed); a ``type`` unknown to ``registries`` fails with the close
    matches. Nested ``type`` dicts found in ``nested`` registries are checked alike; with
    ``strict`` (pipelines: any nested ``type`` is a transform) an unknown nested one fails."""
    if not isinstance(cfg, dict):
        raise ConfigError(f'{path} must be a dict with a "type" key, got {cfg!r}')
    cls = _lookup(cfg.get('type'), registries)
    if cls is None:
        check_type(cfg, registries[0])  # raises naming the type and its close matches
        return
    allowed = accepted_args(cls)
    if allowed is not None:
        check_keys(set(cfg) - {'type'}, (allowed | set(extra)) - set(exclude), path,
                   owner=cls.__name__)
    for key, value in cfg.items():
        _walk(value, f'{path}.{key}', nested or registries, strict)


def _walk(value, path, registries, strict):
    if isinstance(value, dict):
        if 'type' in value and (strict or _lookup(value['type'], registries) is not None):
            _check_typed(value, path, registries, strict=strict)
        else:
            for key, item in value.items():
                _walk(item, f'{path}.{key}', registries, strict)
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            _walk(item, f'{path}[{i}]', registries, strict)


def _check_plain(cfg, keys, path):
    if cfg is None:
        return
    if not isinstance(cfg, dict):
        raise ConfigError(f'{path} must be a dict with keys {", ".join(keys)}, got {cfg!r}')
    check_keys(cfg, keys, path)


def _count(cfg, key, path, minimum):
    if key not in cfg:
        return
    value = cfg[key]
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        kind = 'a positive int' if minimum > 0 else 'a non-negative int'
        raise ConfigError(f'{path}.{key} must be {kind}, got {value!r}')


def _loader_keys():
    """``build_dataloader``'s arguments and the DataLoader ones its ``**kwargs`` reach."""
    from torch.utils.data import DataLoader
    from ..datasets import build_dataloader
    own = set(inspect.signature(build_dataloader).parameters) - {'dataset', 'kwargs'}
    set_there = {'batch_size', 'sampler', 'batch_sampler', 'num_workers', 'collate_fn',
                 'worker_init_fn'}
    return own | (accepted_args(DataLoader) - set_there - {'dataset'})


def _check_data(data):
    if not isinstance(data, dict):
        raise ConfigError(f'data must be a dict with keys {", ".join(DATA_KEYS)}, got {data!r}')
    if 'imgs_per_gpu' in data:
        raise ConfigError('data.imgs_per_gpu is the mmdet 1.x name of data.samples_per_gpu: '
                          'rename it')
    check_keys(data, DATA_KEYS, 'data')
    _count(data, 'samples_per_gpu', 'data', 1)
    _count(data, 'workers_per_gpu', 'data', 0)
    loader_keys = _loader_keys()
    for name in ('train_dataloader', 'val_dataloader', 'test_dataloader'):
        if data.get(name) is not None:
            _check_plain(data[name], loader_keys, f'data.{name}')
            _count(data[name], 'samples_per_gpu', f'data.{name}', 1)
            _count(data[name], 'workers_per_gpu', f'data.{name}', 0)
    for split in ('train', 'val', 'test'):
        if data.get(split) is not None:
            extra = ('samples_per_gpu', ) if split != 'train' else ()
            _check_dataset(data[split], f'data.{split}', extra)


def _check_dataset(cfg, path, extra=()):
    from ..datasets.dataset_wrappers import ConcatDataset, RepeatDataset
    if isinstance(cfg, (list, tuple)):  # concatenated
        for i, item in enumerate(cfg):
            _check_dataset(item, f'{path}[{i}]', extra)
        return
    if not isinstance(cfg, dict):
        raise ConfigError(f'{path} must be a dataset config (a dict with a "type") or a list '
                          f'of them, got {cfg!r}')
    _count(cfg, 'samples_per_gpu', path, 1)
    cls = _lookup(cfg.get('type'), (DATASETS, ))
    if cls in (ConcatDataset, RepeatDataset):  # built by ckptzoo.datasets.build_dataset
        inner = 'datasets' if cls is ConcatDataset else 'dataset'
        check_keys(set(cfg) - {'type'}, accepted_args(cls) | set(extra), path,
                   owner=cls.__name__)
        _check_dataset(cfg.get(inner), f'{path}.{inner}')
        return
    if isinstance(cfg.get('ann_file'), (list, tuple)):
        extra = tuple(extra) + ('separate_eval', )  # one dataset per file, concatenated
    _check_typed(cfg, path, (DATASETS, ), (TRANSFORMS, ), extra=extra)
    for i, step in enumerate(cfg.get('pipeline') or []):
        _check_typed(step, f'{path}.pipeline[{i}]', (TRANSFORMS, ), strict=True)


def _dataset_classes(cfg):
    """The dataset classes of a (possibly wrapped or concatenated) dataset config."""
    from ..datasets.dataset_wrappers import ConcatDataset, RepeatDataset
    if isinstance(cfg, (list, tuple)):
        return [c for item in cfg for c in _dataset_classes(item)]
    cls = _lookup(cfg.get('type'), (DATASETS, ))
    if cls is ConcatDataset:
        return _dataset_classes(cfg.get('datasets') or [])
    if cls is RepeatDataset and isinstance(cfg.get('dataset'), dict):
        return [RepeatDataset]
    return [cls] if cls is not None else []


def _check_optimizer(cfg):
    from ..runner.optimizer_constructor import CUSTOM_KEY_FIELDS, PARAMWISE_KEYS
    _check_typed(cfg, 'optimizer', (OPTIMIZERS, ), extra=('constructor', 'paramwise_cfg'),
                 exclude=('params', ))
    paramwise = cfg.get('paramwise_cfg')
    if isinstance(paramwise, dict) and cfg.get('constructor') in (
            None, 'DefaultOptimizerConstructor'):
        check_keys(paramwise, PARAMWISE_KEYS, 'optimizer.paramwise_cfg')
        for name, rule in (paramwise.get('custom_keys') or {}).items():
            if isinstance(rule, dict):
                check_keys(rule, CUSTOM_KEY_FIELDS, f'optimizer.paramwise_cfg.custom_keys.{name}')


def _dry_build(cfg, path):
    """Build a hook once to run its own argument checks (cheap, no side effects); its error
    is re-raised naming the config key."""
    try:
        HOOKS.build(cfg)
    except (TypeError, ValueError, KeyError) as exc:
        message = exc.args[0] if exc.args and isinstance(exc.args[0], str) else str(exc)
        raise ConfigError(f'{path}: {message}') from exc


def _check_optimizer_hook(optimizer_config, fp16, distributed):
    from ..runner.hooks import Fp16OptimizerHook, Hook
    from .train import select_optimizer_hook
    if isinstance(fp16, dict):
        check_keys(fp16, accepted_args(Fp16OptimizerHook), 'fp16', owner='Fp16OptimizerHook')
    if isinstance(optimizer_config, Hook):
        return
    try:
        hook_cfg = select_optimizer_hook(optimizer_config, fp16, distributed)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f'optimizer_config: {exc}') from exc
    _check_typed(hook_cfg, 'optimizer_config', (HOOKS, ))
    _dry_build(hook_cfg, 'optimizer_config')


def _check_schedule(config, suffix, path):
    from ..runner.hooks import Hook
    from ..runner.hooks.lr_updater import schedule_hook_cfg
    if config is None or isinstance(config, Hook):
        return
    try:
        hook_cfg = schedule_hook_cfg(config, suffix, path)
    except (TypeError, ValueError, KeyError) as exc:
        raise ConfigError(str(exc.args[0]) if exc.args else str(exc)) from exc
    _check_typed(hook_cfg, path, (HOOKS, ))
    _dry_build(hook_cfg, path)


def _check_hook(config, path, default_type):
    if not isinstance(config, dict):
        return  # None, or a Hook instance
    hook_cfg = dict(config)
    hook_cfg.setdefault('type', default_type)
    _check_typed(hook_cfg, path, (HOOKS, ))
    _dry_build(hook_cfg, path)


def _check_log_config(config):
    if config is None:
        return
    _check_plain(config, LOG_CONFIG_KEYS, 'log_config')
    for i, hook in enumerate(config.get('hooks') or []):
        _check_typed(hook, f'log_config.hooks[{i}]', (HOOKS, ))


def _check_evaluation(evaluation, val_cfg, distributed):
    from ..runner.hooks import DistEvalHook, EvalHook
    from ..runner.hooks.evaluation import check_eval_kwargs
    if not isinstance(evaluation, dict):
        raise ConfigError(f'evaluation must be a dict of EvalHook and dataset.evaluate '
                          f'arguments, got {evaluation!r}')
    hook_cls = DistEvalHook if distributed else EvalHook
    own = [p for p in inspect.signature(hook_cls).parameters
           if p not in ('dataloader', 'eval_kwargs')]
    eval_kwargs = {k: v for k, v in evaluation.items() if k not in own}
    classes = _dataset_classes(val_cfg) if val_cfg is not None else []
    for cls in classes:
        check_eval_kwargs(cls, eval_kwargs, own)
    if not classes:
        check_keys(eval_kwargs, own, 'evaluation', owner=hook_cls.__name__)


def _check_dist_params(config):
    if config is None:
        return
    import torch.distributed as dist
    keys = set(inspect.signature(dist.init_process_group).parameters) | {'port'}  # mmdet: slurm
    _check_plain(config, keys - {'_ranks'}, 'dist_params')


def _check_synthetic_data(config):
    if config is None:
        return
    from ..datasets import generate_coco, generate_voc
    generators = dict(voc=generate_voc, coco=generate_coco)
    fmt = config.get('format', 'voc') if isinstance(config, dict) else None
    if fmt not in generators:
        raise ConfigError(f'synthetic_data must be a dict with format one of '
                          f'{sorted(generators)}, got {config!r}')
    _check_plain(config, (accepted_args(generators[fmt]) or set()) | {'format'},
                 'synthetic_data')
