"""mmdet 2.x's ``train_detector`` for any ckptzoo model: assemble the run, load or resume its
checkpoint, plan it under ``memory_budget``, attach the memory hook, run. ``tools/train.py`` is
a thin command line over it.

The assembly (:func:`build_training` and its parts) lives in :mod:`ckptzoo.apis.assemble`, so
that the memory planner (:mod:`ckptzoo.apis.plan`) and the benchmarks share it without
importing the training loop; it is re-exported here, where mmdet 2.x users and the tests look
for it (``from ckptzoo.apis.train import build_train_model``). The route of a budget is one way:
:func:`~ckptzoo.apis.plan.plan_training` gives the plan and the run to train (the one it
planned on), :func:`~ckptzoo.apis.batch_plans.attach_memory_hook` registers the one memory
hook, and that run trains."""
from __future__ import annotations

import logging
import random
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
import torch.nn as nn
from mmengine.config import Config
from torch.utils.data import Dataset

from ..runner import BaseRunner
from ..runner.checkpoint import find_latest_checkpoint
from ..runner.work_dir import check_work_dir, expand_path
from ..runner.work_dir_lock import lock_work_dir
from .assemble import (TrainingRun, apply_checkpoint_plan, auto_scale_lr, build_train_datasets,
                       build_train_model, build_training, model_defaults, resolve_auto_with_cp,
                       resolve_device)
from .batch_plans import attach_memory_hook
from .options import select_optimizer_hook
from .plan import plan_training

__all__ = ['set_random_seed', 'select_optimizer_hook', 'find_latest_checkpoint', 'train_model',
           'prepare_synthetic_data', 'auto_scale_lr', 'apply_checkpoint_plan',
           'model_defaults', 'build_train_model', 'build_train_datasets', 'TrainingRun',
           'build_training', 'resolve_device', 'resolve_auto_with_cp']


def set_random_seed(seed: int, deterministic: bool = False) -> None:
    """Seed Python's, numpy's and torch's (CPU and every CUDA device) generators;
    ``deterministic`` also makes cuDNN deterministic (and turns its benchmark mode off)."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    torch.cuda.manual_seed_all(seed)
    if deterministic:
        torch.backends.cudnn.deterministic = True
        torch.backends.cudnn.benchmark = False


def prepare_synthetic_data(cfg: Config, distributed: bool = False) -> str | None:
    """Write the generated dataset that ``cfg.synthetic_data`` describes, once: nothing is
    downloaded, and a complete dataset made with the same arguments is reused.

    ``format='voc'`` (the default) takes the arguments of
    :func:`ckptzoo.datasets.generate_voc`, ``format='coco'`` those of
    :func:`ckptzoo.datasets.generate_coco`, ``format='coco_panoptic'`` those of
    :func:`ckptzoo.datasets.generate_coco_panoptic`."""
    spec = cfg.get('synthetic_data')
    if not spec:
        return None
    from ..datasets import generate_coco, generate_coco_panoptic, generate_voc
    from ..runner.dist_utils import get_dist_info
    spec = dict(spec)
    fmt = spec.pop('format', 'voc')
    generators = dict(voc=generate_voc, coco=generate_coco,
                      coco_panoptic=generate_coco_panoptic)
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


def train_model(model: nn.Module, dataset: Dataset | Sequence[Dataset], cfg: Config,
                distributed: bool = False, validate: bool = False, timestamp: str | None = None,
                meta: dict[str, Any] | None = None,
                logger: logging.Logger | None = None) -> BaseRunner:
    """Train ``model`` on ``dataset`` (a dataset or a list, one per workflow phase): assemble
    the run, load or resume its checkpoint, plan it under ``memory_budget``
    (:mod:`ckptzoo.apis.plan`), attach the memory hook, run it; returns the runner. The work
    dir is held for the run (:mod:`ckptzoo.runner.work_dir_lock`): a second run there fails
    with ``WorkDirLocked``."""
    for key in ('resume_from', 'load_from'):  # '~' expanded; '' is an error, not "none"
        if cfg.get(key) is not None:
            cfg[key] = expand_path(cfg[key], key, 'a checkpoint file (or None)')
    # one run per work dir (tools/train.py took it already, before writing its log there)
    lock = (lock_work_dir(check_work_dir(cfg.work_dir), distributed)
            if cfg.get('work_dir') is not None else None)
    try:
        return _train_model(model, dataset, cfg, distributed, validate, timestamp, meta, logger)
    finally:
        if lock is not None:
            lock.release()


def _train_model(model, dataset, cfg, distributed, validate, timestamp, meta, logger):
    run = build_training(cfg, model, dataset, distributed=distributed, validate=validate,
                         timestamp=timestamp, meta=meta, logger=logger)
    resume_from = cfg.get('resume_from')
    if resume_from is None and cfg.get('auto_resume'):
        resume_from = find_latest_checkpoint(cfg.work_dir)
    if not resume_from and cfg.get('load_from'):
        # before planning: a checkpoint that does not fit fails before the probe steps, and a
        # run the planner assembles for other options trains the same module
        run.runner.load_checkpoint(cfg.load_from)
    # the plan (None without a budget) and the run to train: the one the planner planned on
    plan, run = plan_training(run, cfg, logger=run.runner.logger, resume=bool(resume_from))
    attach_memory_hook(run, cfg, plan, run.runner.logger)  # the run's one memory hook
    runner = run.runner
    if resume_from:
        runner.resume(resume_from)
    runner.run(run.data_loaders, run.workflow)
    return runner
