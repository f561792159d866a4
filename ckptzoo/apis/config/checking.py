"""Checking a loaded config: :func:`check_config`, every key against the schema (the fixed
sub-keys of :mod:`.schema`, and for a dict built into a registered class, ``type=...``, that
class's ``__init__`` signature: :func:`ckptzoo.registry.accepted_args`), and the values that
would otherwise fail late. Hooks that take ``**kwargs`` for somewhere else check them
themselves (CheckpointHook: ``save_checkpoint``'s; EvalHook: ``dataset.evaluate``'s)."""
from __future__ import annotations

import inspect

from mmengine.config import Config

from ...registry import (DATASETS, HOOKS, MODELS, OPTIMIZERS, RUNNERS, TASK_UTILS, TRANSFORMS,
                         accepted_args, check_keys, check_type, derives_units, unscoped)
from .near_miss import warn_near_misses
from .schema import AUTO_SCALE_LR_KEYS, DATA_KEYS, LOG_CONFIG_KEYS, ConfigError

__all__ = ['check_config', 'memory_check_interval', 'DEFAULT_MEMORY_CHECK_INTERVAL']


#: what a training run reads with no default (mmdet 2.x's configs take them from ``_base_``)
TRAINING_KEYS = {
    'model': "a model = dict(type=...)", 'data': 'data = dict(samples_per_gpu=..., train=...)',
    'optimizer': "optimizer = dict(type='SGD', lr=...)",
    'lr_config': "lr_config = dict(policy='step', step=[...]) (a schedule's; lr_config = None "
                 'trains at a constant lr)',
    'workflow': "workflow = [('train', 1)] (mmdet's default_runtime.py)"}


def check_config(cfg: Config, distributed: bool = False, validate: bool = True,
                 complete: bool = False) -> None:
    """Check every key ckptzoo reads, and the values that would fail only later (batch and
    worker counts, schedule steps, hook arguments, evaluation metric), without building the
    model or the data: the one check of a training run's config (``tools/train.py`` calls
    it before anything is built, with ``complete``: the keys of :data:`TRAINING_KEYS` must be
    there). Without ``validate`` (``--no-validate``) ``evaluation`` is not used and not
    checked. Raises :class:`ConfigError` or ``UnknownKeyError`` (``ckptzoo.registry``),
    ``UnknownTypeError`` for an unknown ``type``."""
    from ...runner import optimizer_constructor  # noqa: F401  (registers the constructor)
    from ... import datasets, models, runner  # noqa: F401  (fill the registries)
    missing = [k for k in TRAINING_KEYS if k not in cfg] if complete else []
    if missing:
        raise ConfigError('the config has no ' + ', '.join(missing) + ', which training '
                          'reads: give ' + '; '.join(TRAINING_KEYS[k] for k in missing))
    warn_near_misses(cfg)
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
            if unscoped(hook.get('type')) == 'RFSearchHook':  # its mode, settings and file
                _dry_build({k: v for k, v in hook.items() if k != 'priority'},
                           f'custom_hooks[{i}]')
    if validate and cfg.get('evaluation') is not None:
        _check_evaluation(cfg.evaluation, data.get('val') if data else None, distributed)
    _check_plain(cfg.get('auto_scale_lr'), AUTO_SCALE_LR_KEYS, 'auto_scale_lr')
    _check_dist_params(cfg.get('dist_params'))
    _check_synthetic_data(cfg.get('synthetic_data'))
    memory_check_interval(cfg)
    _check_memory_budget(cfg.get('memory_budget'))


def _check_memory_budget(value) -> None:
    """A malformed ``memory_budget`` fails here, before a model or data is built (the
    planner reads it again with the device's memory for a fraction)."""
    if value is None:
        return
    from ...memory.model.budget import parse_budget
    try:
        parse_budget(value, device_total=1 << 40)  # a fraction: its form only, no device
    except (TypeError, ValueError) as exc:
        raise ConfigError(str(exc)) from None


#: ``memory_check_interval`` where a config gives none: every 50th training step on a CPU
#: (the live-tensor tracker slows the step it measures; CUDA logs every step's peak anyway)
DEFAULT_MEMORY_CHECK_INTERVAL = 50


def memory_check_interval(cfg: Config) -> int | None:
    """``memory_check_interval``: measure every Nth training step's peak memory on a CPU and
    log it as ``memory`` (CUDA logs it anyway); 0 is off; None where the config sets none
    (the run then measures every :data:`DEFAULT_MEMORY_CHECK_INTERVAL`-th step on a CPU)."""
    value = cfg.get('memory_check_interval')
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigError(f'memory_check_interval must be a non-negative int (0: off; N: '
                          f'measure the peak memory of every Nth training step on a CPU), got '
                          f'{value!r}')
    return value


def _lookup(obj_type, registries):
    if inspect.isclass(obj_type):
        return obj_type
    for registry in registries:
        cls = registry.module_dict.get(unscoped(obj_type)) if isinstance(obj_type, str) \
            else None
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
        if derives_units(cls):  # with_cp sets the units derived for a user's part
            allowed = allowed | {'with_cp'}
        check_keys(set(cfg) - {'type'}, (allowed | set(extra)) - set(exclude), path,
                   owner=cls.__name__)
    # keys a class reads from a nested part's config before building it (DETRHead pops
    # loss_cls.bg_cls_weight): ``nested_config_keys = {argument: (key, ...)}``
    nested_extra = getattr(cls, 'nested_config_keys', {})
    for key, value in cfg.items():
        _walk(value, f'{path}.{key}', nested or registries, strict, nested_extra.get(key, ()))


def _walk(value, path, registries, strict, extra=()):
    if isinstance(value, dict):
        if 'type' in value and (strict or _lookup(value['type'], registries) is not None):
            _check_typed(value, path, registries, strict=strict, extra=extra)
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
    from ...datasets import build_dataloader
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
    from ...datasets.dataset_wrappers import ConcatDataset, RepeatDataset
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
    from ...datasets.dataset_wrappers import ConcatDataset, RepeatDataset
    if isinstance(cfg, (list, tuple)):
        return [c for item in cfg for c in _dataset_classes(item)]
    cls = _lookup(cfg.get('type'), (DATASETS, ))
    if cls is ConcatDataset:
        return _dataset_classes(cfg.get('datasets') or [])
    if cls is RepeatDataset and isinstance(cfg.get('dataset'), dict):
        return [RepeatDataset]
    return [cls] if cls is not None else []


def _check_optimizer(cfg):
    from ...runner.optimizer_constructor import CUSTOM_KEY_FIELDS, PARAMWISE_KEYS
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
    from ...runner.hooks import Fp16OptimizerHook, Hook
    from ..options import select_optimizer_hook
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
    from ...runner.hooks import Hook
    from ...runner.hooks.lr_updater import schedule_hook_cfg
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
    from ...runner.hooks import DistEvalHook, EvalHook
    from ...runner.hooks.evaluation import check_eval_kwargs
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
    from ...datasets import generate_coco, generate_coco_panoptic, generate_voc
    generators = dict(voc=generate_voc, coco=generate_coco,
                      coco_panoptic=generate_coco_panoptic)
    fmt = config.get('format', 'voc') if isinstance(config, dict) else None
    if fmt not in generators:
        raise ConfigError(f'synthetic_data must be a dict with format one of '
                          f'{sorted(generators)}, got {config!r}')
    _check_plain(config, (accepted_args(generators[fmt]) or set()) | {'format'},
                 'synthetic_data')
