"""mmdet 2.x's ``train_detector`` for any ckptzoo model: data loaders, device / DDP, optimizer,
runner, hooks, resume, run. ``tools/train.py`` is a thin command line over it; the assembly
(:func:`build_training`) exists once and is shared with the memory planner and the benchmarks."""
import copy
import random
import warnings
from dataclasses import dataclass

import numpy as np
import torch

from ..registry import build_optimizer, build_runner
from ..runner import EpochBasedRunner, MMDistributedDataParallel
from ..runner.checkpoint import find_latest_checkpoint
from ..runner.hooks import Hook
from ..runner.work_dir import check_work_dir, expand_path

__all__ = ['set_random_seed', 'select_optimizer_hook', 'find_latest_checkpoint', 'train_model',
           'prepare_synthetic_data', 'auto_scale_lr', 'apply_checkpoint_plan',
           'model_defaults', 'build_train_model', 'build_train_datasets', 'TrainingRun',
           'build_training', 'resolve_device']

_OPTIMIZER_HOOKS = ('OptimizerHook', 'Fp16OptimizerHook', 'GradientCumulativeOptimizerHook',
                    'GradientCumulativeFp16OptimizerHook')


def set_random_seed(seed, deterministic=False):
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    torch.cuda.manual_seed_all(seed)
    if deterministic:
        torch.backends.cudnn.deterministic = True
        torch.backends.cudnn.benchmark = False


def prepare_synthetic_data(cfg, distributed=False):
    """Write the generated dataset that ``cfg.synthetic_data`` describes, once: nothing is
    downloaded, and a complete dataset made with the same arguments is reused.

    ``format='voc'`` (the default) takes the arguments of
    :func:`ckptzoo.datasets.generate_voc`, ``format='coco'`` those of
    :func:`ckptzoo.datasets.generate_coco`."""
    spec = cfg.get('synthetic_data')
    if not spec:
        return None
    from ..datasets import generate_coco, generate_voc
    from ..runner.dist_utils import get_dist_info
    spec = dict(spec)
    fmt = spec.pop('format', 'voc')
    generators = dict(voc=generate_voc, coco=generate_coco)
    if fmt not in generators:
        raise ValueError(f'synthetic_data.format must be one of {sorted(generators)}, '
                         f'got {fmt!r}')
    rank, _ = get_dist_info()
    root = None
    if rank == 0:
        root = generators[fmt](**spec)
    if distributed:
        torch.distributed.barrier()
    return root


def select_optimizer_hook(optimizer_config, fp16_cfg=None, distributed=False):
    """The optimizer hook config from ``optimizer_config`` and ``fp16`` (DESIGN.md's rule).

    ``fp16`` and ``cumulative_iters`` (a key, or the accumulating ``type``) give
    ``GradientCumulativeFp16OptimizerHook``; only ``fp16`` gives ``Fp16OptimizerHook``; only
    ``cumulative_iters`` ``GradientCumulativeOptimizerHook``; neither ``OptimizerHook`` (or the
    config's own type). mmdet 2.x crashes on the first combination.
    """
    if isinstance(optimizer_config, Hook):
        if fp16_cfg is not None:
            raise ValueError('fp16 needs optimizer_config as a dict, got a Hook instance')
        return optimizer_config
    if optimizer_config is None:
        optimizer_config = {}
    if not isinstance(optimizer_config, dict):
        raise TypeError(f'optimizer_config must be a dict, got {optimizer_config!r}')
    cfg = dict(optimizer_config)
    hook_type = cfg.pop('type', None)
    if hook_type is not None and hook_type not in _OPTIMIZER_HOOKS:
        if fp16_cfg is not None:
            raise ValueError(f'fp16 cannot be combined with the custom optimizer hook '
                             f'{hook_type!r}: use one of {", ".join(_OPTIMIZER_HOOKS)}')
        return dict(type=hook_type, **cfg)
    cumulative = 'cumulative_iters' in cfg or (hook_type or '').startswith('GradientCumulative')
    fp16 = fp16_cfg is not None or (hook_type or '').endswith('Fp16OptimizerHook')
    if fp16_cfg is not None:
        if not isinstance(fp16_cfg, dict):
            raise TypeError(f'fp16 must be a dict such as dict(loss_scale=512.), got {fp16_cfg!r}')
        cfg.update(fp16_cfg)
    if fp16:
        cfg.setdefault('distributed', distributed)
    name = ('GradientCumulativeFp16OptimizerHook' if fp16 and cumulative else
            'Fp16OptimizerHook' if fp16 else
            'GradientCumulativeOptimizerHook' if cumulative else 'OptimizerHook')
    return dict(type=name, **cfg)


def auto_scale_lr(cfg, world_size, logger=None):
    """mmdet 2.x's ``auto_scale_lr = dict(enable=True, base_batch_size=16)``: scale
    ``optimizer.lr`` by the total batch / ``base_batch_size`` (linear scaling rule)."""
    spec = cfg.get('auto_scale_lr')
    if not spec or not spec.get('enable', False):
        return None
    base = spec.get('base_batch_size')
    if not isinstance(base, int) or base < 1:
        raise ValueError(f'auto_scale_lr.base_batch_size must be a positive int, got {base!r}')
    batch = world_size * cfg.data.samples_per_gpu
    ratio = batch / base
    cfg.optimizer.lr = cfg.optimizer.lr * ratio
    if logger is not None:
        logger.info(f'auto_scale_lr: batch {batch} / base {base}: lr scaled by {ratio:g} to '
                    f'{cfg.optimizer.lr:g}')
    return cfg.optimizer.lr


def resolve_device(cfg):
    """The device ``cfg.device`` names (validated), or ``'cuda'`` when available, else
    ``'cpu'``."""
    device = cfg.get('device')
    if device is None:
        return 'cuda' if torch.cuda.is_available() else 'cpu'
    if device not in ('cpu', 'cuda') and not str(device).startswith('cuda:'):
        raise ValueError(f"device must be 'cpu', 'cuda' or 'cuda:N', got {device!r}")
    return device


def apply_checkpoint_plan(model, cfg, distributed=False):
    """Apply the config's top-level ``checkpoint_plan = {unit name or glob: mode}`` (see
    ``model.set_checkpoint_plan``) and ``checkpoint_segments = [[first unit, last unit], ...]``
    (``model.set_checkpoint_segments``), and refuse, under DDP, reentrant checkpointing together
    with ``find_unused_parameters=True``: reentrant checkpointing runs a second backward
    inside the first, where DDP marks the same parameters ready twice and fails at the first
    backward ("Expected to mark a variable ready only once")."""
    from ..models.checkpointing import reentrant_units
    if cfg.get('checkpoint_plan'):
        if not hasattr(model, 'set_checkpoint_plan'):
            raise TypeError(f'checkpoint_plan needs a model with checkpoint units, got '
                            f'{type(model).__name__}')
        model.set_checkpoint_plan(dict(cfg.checkpoint_plan))
    if cfg.get('checkpoint_segments'):
        if not hasattr(model, 'set_checkpoint_segments'):
            raise TypeError(f'checkpoint_segments needs a model with checkpoint units, got '
                            f'{type(model).__name__}')
        model.set_checkpoint_segments([list(s) for s in cfg.checkpoint_segments])
    if distributed and cfg.get('find_unused_parameters', False):
        units = reentrant_units(model)
        if units:
            raise ValueError(
                f'find_unused_parameters=True cannot be combined with cp_use_reentrant=True '
                f'under DDP (checkpointed with the reentrant implementation: '
                f'{", ".join(units[:3])}{" ..." if len(units) > 3 else ""}): DDP would mark '
                'parameters ready twice in backward. Fix: set cp_use_reentrant=False (the '
                'default, e.g. --cfg-options model.backbone.cp_use_reentrant=False) or '
                'find_unused_parameters=False.')


def model_defaults(cfg):
    """mmdet 2.x configs may keep train_cfg / test_cfg at the top level."""
    defaults = {}
    for key in ('train_cfg', 'test_cfg'):
        if cfg.get(key) is not None and key not in cfg.model:
            defaults[key] = cfg.get(key)
    return defaults or None


def build_train_model(cfg):
    """The model of ``cfg.model``, its weights initialised (``init_cfg`` / ``init_weights``).
    ``with_cp='auto'`` is checked (it needs ``memory_budget``) and left to the planner."""
    from ..memory.planner import planning_requested
    from ..registry import build_model
    planning_requested(cfg)
    model = build_model(cfg.model, default_args=model_defaults(cfg))
    if hasattr(model, 'init_weights'):
        model.init_weights()
    return model


def build_train_datasets(cfg):
    """``[train dataset]``, plus the val set through the train pipeline for a two-phase
    workflow (mmdet 2.x's tools/train.py)."""
    from ..datasets import build_dataset
    datasets = [build_dataset(cfg.data.train)]
    if len(cfg.workflow) == 2:
        val_dataset = copy.deepcopy(cfg.data.val)
        val_dataset.pipeline = cfg.data.train.get('pipeline', val_dataset.get('pipeline'))
        datasets.append(build_dataset(val_dataset))
    return datasets


@dataclass
class TrainingRun:
    """What :func:`build_training` assembles: ``runner.run(data_loaders, workflow)`` trains."""

    runner: object
    data_loaders: list
    workflow: list
    optimizer_config: dict
    distributed: bool = False
    validate: bool = False

    @property
    def model(self):
        return self.runner.model

    @property
    def optimizer(self):
        return self.runner.optimizer


def build_training(cfg, model=None, datasets=None, distributed=False, validate=False,
                   timestamp=None, meta=None, logger=None):
    """The one assembly of a training run from a config: model (built from ``cfg.model`` when
    not given), data loaders (datasets from ``cfg.data`` when not given), device / DDP,
    optimizer, runner, optimizer hook (:func:`select_optimizer_hook`), lr / checkpoint / log /
    custom hooks and evaluation. ``tools/train.py``, the memory planner and the benchmarks all
    build their step here, so they measure the step that trains."""
    from ..datasets import build_dataloader, build_dataset
    from ..runner.hooks import DistEvalHook, DistSamplerSeedHook, EvalHook

    if cfg.get('work_dir') is not None:  # '~' expanded, '' refused, before anything writes
        cfg.work_dir = check_work_dir(cfg.work_dir)
    if model is None:
        model = build_train_model(cfg)
    if datasets is None:
        datasets = build_train_datasets(cfg)
    dataset = datasets if isinstance(datasets, (list, tuple)) else [datasets]
    runner_cfg = cfg.get('runner')
    if runner_cfg is None:
        if 'total_epochs' not in cfg:
            raise KeyError('the config needs runner = dict(type=..., max_epochs=... or '
                           'max_iters=...) (or mmdet 1.x total_epochs)')
        runner_cfg = dict(type='EpochBasedRunner', max_epochs=cfg.total_epochs)
        warnings.warn('config has no runner: using EpochBasedRunner with total_epochs')
    runner_cfg = dict(runner_cfg)
    data_cfg = cfg.data
    loader_cfg = dict(samples_per_gpu=data_cfg.get('samples_per_gpu', 2),
                      workers_per_gpu=data_cfg.get('workers_per_gpu', 2),
                      num_gpus=1, dist=distributed, seed=cfg.get('seed'),
                      persistent_workers=data_cfg.get('persistent_workers', False))
    loader_cfg.update(data_cfg.get('train_dataloader', {}))
    data_loaders = [build_dataloader(ds, **loader_cfg) for ds in dataset]

    auto_scale_lr(cfg, torch.distributed.get_world_size() if distributed else 1, logger)
    apply_checkpoint_plan(model, cfg, distributed)
    device = resolve_device(cfg)
    model = model.to(device)
    if distributed:
        model = MMDistributedDataParallel(
            model, device_ids=[torch.cuda.current_device()] if device != 'cpu' else None,
            broadcast_buffers=False,
            find_unused_parameters=cfg.get('find_unused_parameters', False))
    optimizer = build_optimizer(model, cfg.optimizer)
    runner = build_runner(runner_cfg, default_args=dict(
        model=model, optimizer=optimizer, work_dir=cfg.work_dir, logger=logger, meta=meta))
    runner.timestamp = timestamp or runner.timestamp

    optimizer_config = select_optimizer_hook(cfg.get('optimizer_config'), cfg.get('fp16'),
                                             distributed)
    runner.register_training_hooks(
        cfg.lr_config, optimizer_config, cfg.get('checkpoint_config'), cfg.get('log_config'),
        cfg.get('momentum_config'), custom_hooks_config=cfg.get('custom_hooks'))
    if distributed and isinstance(runner, EpochBasedRunner):
        runner.register_hook(DistSamplerSeedHook())

    if validate and data_cfg.get('val') is None:
        runner.logger.warning('the config has no data.val: training without validation')
        validate = False
    if validate:
        val_cfg = dict(data_cfg.val)
        val_samples_per_gpu = val_cfg.pop('samples_per_gpu', 1)
        val_dataset = build_dataset(val_cfg, dict(test_mode=True))
        val_loader_cfg = dict(samples_per_gpu=val_samples_per_gpu,
                              workers_per_gpu=data_cfg.get('workers_per_gpu', 2),
                              dist=distributed, shuffle=False)
        val_loader_cfg.update(data_cfg.get('val_dataloader', {}))
        val_loader = build_dataloader(val_dataset, **val_loader_cfg)
        eval_cfg = dict(cfg.get('evaluation', {}))
        eval_cfg['by_epoch'] = runner_cfg['type'] != 'IterBasedRunner'
        hook_cls = DistEvalHook if distributed else EvalHook
        runner.register_hook(hook_cls(val_loader, **eval_cfg), priority='LOW')
    return TrainingRun(runner, data_loaders, cfg.workflow, optimizer_config, distributed,
                       validate)


def train_model(model, dataset, cfg, distributed=False, validate=False, timestamp=None,
                meta=None, logger=None):
    """Train ``model`` on ``dataset`` (a dataset or a list, one per workflow phase)."""
    for key in ('resume_from', 'load_from'):  # '~' expanded; '' is an error, not "none"
        if cfg.get(key) is not None:
            cfg[key] = expand_path(cfg[key], key, 'a checkpoint file (or None)')
    run = build_training(cfg, model, dataset, distributed=distributed, validate=validate,
                         timestamp=timestamp, meta=meta, logger=logger)
    resume_from = cfg.get('resume_from')
    if resume_from is None and cfg.get('auto_resume'):
        resume_from = find_latest_checkpoint(cfg.work_dir)
    if not resume_from and cfg.get('load_from'):
        # before planning: a checkpoint that does not fit fails before the probe steps, and a
        # run the planner rebuilds trains the same module
        run.runner.load_checkpoint(cfg.load_from)
    from ..memory.planner import plan_training
    plan = plan_training(run, cfg, logger=run.runner.logger, resume=bool(resume_from))
    if plan is not None:  # rebuilt when the plan needs fp16 / accumulation / a smaller batch
        run = plan.run
    runner = run.runner
    if resume_from:
        runner.resume(resume_from)
    runner.run(run.data_loaders, run.workflow)
    return runner
