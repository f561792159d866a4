"""The one assembly of a training run from a config: the model (``with_cp='auto'`` resolved),
the datasets, the data loaders, device / DDP, optimizer, runner and hooks, as
:class:`TrainingRun`; and :meth:`TrainingRun.with_options`, the same model and data assembled
for other fp16 / accumulation / batch options.

Why a module of its own: training (:mod:`ckptzoo.apis.train`), the memory planner
(:mod:`ckptzoo.apis.plan`, whose outer search assembles trial runs and hands the winning one
back to train) and the benchmarks all need the assembly, and the planner must not import the
training loop to get it. Imports go one way: ``train`` -> ``plan`` -> ``assemble``, and
``assemble`` imports neither. What is built here is the run as configured; the memory hook is
registered afterwards, once (:func:`ckptzoo.apis.batch_plans.attach_memory_hook`).
"""
from __future__ import annotations

import copy
import logging
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn as nn
from mmengine.config import Config
from torch.utils.data import DataLoader, Dataset

from ..registry import build_optimizer, build_runner
from ..runner import BaseRunner, EpochBasedRunner, MMDistributedDataParallel
from ..runner.hooks import Hook, rfnext_init_model
from ..runner.work_dir import check_work_dir
from ..utils.config_file import building_from
from ..utils.model_wrapper import unwrap_model
from .options import TrainingOptions, samples_per_gpu_of, select_optimizer_hook

__all__ = ['TrainingRun', 'build_training', 'build_train_model', 'build_train_datasets',
           'model_defaults', 'apply_checkpoint_plan', 'resolve_device', 'auto_scale_lr',
           'resolve_auto_with_cp']


def resolve_auto_with_cp(cfg: Config) -> list[str]:
    """Replace every ``with_cp='auto'`` in ``cfg.model`` by False (the plan, not the flag, sets
    the modes) and return where they were (``['model.backbone.with_cp', ...]``). An ``'auto'``
    needs ``memory_budget``: without one it is an error, before anything is built."""
    autos = []

    def scan(node, path):
        if isinstance(node, dict):
            for key, value in node.items():
                if key == 'with_cp' and value == 'auto':
                    node[key] = False
                    autos.append(f'{path}.with_cp')
                else:
                    scan(value, f'{path}.{key}')
    scan(cfg.model, 'model')
    if autos and cfg.get('memory_budget') is None:
        raise ValueError(f"{autos[0]}='auto' needs a memory budget: set memory_budget = "
                         "'6GB' (bytes, a size with B/KB/MB/GB/KiB/MiB/GiB, or a fraction "
                         "of the GPU such as 0.9) at the top level of the config, or pass "
                         "--cfg-options memory_budget=6GB")
    return autos


def auto_scale_lr(cfg: Config, world_size: int,
                  logger: logging.Logger | None = None) -> float | None:
    """mmdet 2.x's ``auto_scale_lr = dict(enable=True, base_batch_size=16)``: scale
    ``optimizer.lr`` by the total batch / ``base_batch_size`` (linear scaling rule), the
    per-GPU batch being the training loader's (``data.train_dataloader.samples_per_gpu``
    before ``data.samples_per_gpu``, as mmdet 2.x reads it). Returns the new lr, or None when
    it is not enabled."""
    spec = cfg.get('auto_scale_lr')
    if not spec or not spec.get('enable', False):
        return None
    base = spec.get('base_batch_size')
    if not isinstance(base, int) or base < 1:
        raise ValueError(f'auto_scale_lr.base_batch_size must be a positive int, got {base!r}')
    batch = world_size * samples_per_gpu_of(cfg)
    ratio = batch / base
    cfg.optimizer.lr = cfg.optimizer.lr * ratio
    if logger is not None:
        logger.info(f'auto_scale_lr: batch {batch} / base {base}: lr scaled by {ratio:g} to '
                    f'{cfg.optimizer.lr:g}')
    return cfg.optimizer.lr


def resolve_device(cfg: Config) -> str:
    """The device ``cfg.device`` names (validated), or ``'cuda'`` when available, else
    ``'cpu'``."""
    device = cfg.get('device')
    if device is None:
        return 'cuda' if torch.cuda.is_available() else 'cpu'
    if device not in ('cpu', 'cuda') and not str(device).startswith('cuda:'):
        raise ValueError(f"device must be 'cpu', 'cuda' or 'cuda:N', got {device!r}")
    return device


def apply_checkpoint_plan(model: nn.Module, cfg: Config, distributed: bool = False) -> None:
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


def model_defaults(cfg: Config) -> dict[str, Any] | None:
    """The ``default_args`` of the model's build: mmdet 2.x configs may keep ``train_cfg`` /
    ``test_cfg`` at the top level instead of in ``model``."""
    defaults = {}
    for key in ('train_cfg', 'test_cfg'):
        if cfg.get(key) is not None and key not in cfg.model:
            defaults[key] = cfg.get(key)
    return defaults or None


def build_train_model(cfg: Config) -> nn.Module:
    """The model of ``cfg.model``, its weights initialised (``init_cfg`` / ``init_weights``),
    then prepared by ``custom_hooks``' RFSearchHook if there is one (mmdet 2.28's
    ``rfnext_init_model``).
    ``with_cp='auto'`` becomes False here (:func:`resolve_auto_with_cp`: it needs
    ``memory_budget``, and the plan sets the modes)."""
    from ..registry import build_model
    resolve_auto_with_cp(cfg)
    with building_from(cfg.filename):  # paths in the model config relative to the file
        model = build_model(cfg.model, default_args=model_defaults(cfg))
    if hasattr(model, 'init_weights'):
        model.init_weights()
    rfnext_init_model(model, cfg)  # an RFSearchHook's ops, before the optimizer sees them
    return model


def build_train_datasets(cfg: Config) -> list[Dataset]:
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
    """What :func:`build_training` assembles: ``runner.run(data_loaders, workflow)`` trains;
    ``options`` are the fp16 / accumulation / batch it was assembled with."""

    runner: BaseRunner
    data_loaders: list[DataLoader]
    workflow: list
    optimizer_config: dict[str, Any] | Hook
    distributed: bool = False
    validate: bool = False
    options: TrainingOptions | None = None

    @property
    def model(self) -> nn.Module:
        """The runner's model (a DDP wrapper under DDP)."""
        return self.runner.model

    @property
    def optimizer(self) -> torch.optim.Optimizer:
        """The runner's optimizer."""
        return self.runner.optimizer

    def with_options(self, cfg: Config, options: TrainingOptions) -> TrainingRun:
        """This run, or, when ``options`` differ from its own, its model and datasets assembled
        again from a copy of ``cfg`` (the config it was assembled from) with ``options`` set;
        the lr stays as it is (``auto_scale_lr`` is not applied a second time), and the
        timestamp, meta and logger are this run's."""
        if options == self.options:
            return self
        cfg = options.apply_to(copy.deepcopy(cfg))
        cfg.auto_scale_lr = None
        runner = self.runner
        return build_training(cfg, model=unwrap_model(runner.model),
                              datasets=[dl.dataset for dl in self.data_loaders],
                              distributed=self.distributed, validate=self.validate,
                              timestamp=runner.timestamp, meta=runner.meta, logger=runner.logger)


def build_training(cfg: Config, model: nn.Module | None = None,
                   datasets: Dataset | Sequence[Dataset] | None = None,
                   distributed: bool = False, validate: bool = False,
                   timestamp: str | None = None, meta: dict[str, Any] | None = None,
                   logger: logging.Logger | None = None) -> TrainingRun:
    """The one assembly of a training run from a config: model (built from ``cfg.model`` when
    not given), data loaders (datasets from ``cfg.data`` when not given), device / DDP,
    optimizer, runner, optimizer hook (:func:`select_optimizer_hook`), lr / checkpoint / log /
    custom hooks and evaluation. Not the memory hook: the one
    :class:`~ckptzoo.memory.plan_hook.MemoryPlanHook` of a run is registered by
    :func:`ckptzoo.apis.batch_plans.attach_memory_hook` once the plan (or that there is none)
    is known. ``tools/train.py``, the memory planner and the benchmarks all build their step
    here, so they measure the step that trains."""
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
                       validate, TrainingOptions.from_cfg(cfg))
