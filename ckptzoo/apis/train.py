"""mmdet 2.x's ``train_detector`` for any ckptzoo model: data loaders, device / DDP, optimizer,
runner, hooks, resume, run. ``tools/train.py`` is a thin command line over it."""
import glob
import os.path as osp
import random
import re
import warnings

import numpy as np
import torch

from ..registry import build_optimizer, build_runner
from ..runner import EpochBasedRunner, MMDistributedDataParallel
from ..runner.hooks import Hook

__all__ = ['set_random_seed', 'select_optimizer_hook', 'find_latest_checkpoint', 'train_model',
           'prepare_synthetic_data', 'auto_scale_lr']

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


def find_latest_checkpoint(path):
    """``latest.pth`` in ``path``, else the ``*_N.pth`` with the largest N, else None."""
    if osp.exists(osp.join(path, 'latest.pth')):
        return osp.join(path, 'latest.pth')
    best, best_n = None, -1
    for ckpt in glob.glob(osp.join(path, '*.pth')):
        match = re.search(r'_(\d+)\.pth$', ckpt)
        if match and int(match.group(1)) > best_n:
            best, best_n = ckpt, int(match.group(1))
    return best


def _device(cfg):
    device = cfg.get('device')
    if device is None:
        return 'cuda' if torch.cuda.is_available() else 'cpu'
    if device not in ('cpu', 'cuda') and not str(device).startswith('cuda:'):
        raise ValueError(f"device must be 'cpu', 'cuda' or 'cuda:N', got {device!r}")
    return device


def train_model(model, dataset, cfg, distributed=False, validate=False, timestamp=None,
                meta=None, logger=None):
    """Train ``model`` on ``dataset`` (a dataset or a list, one per workflow phase)."""
    from ..datasets import build_dataloader, build_dataset
    from ..runner.hooks import DistEvalHook, DistSamplerSeedHook, EvalHook

    dataset = dataset if isinstance(dataset, (list, tuple)) else [dataset]
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
    device = _device(cfg)
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

    resume_from = cfg.get('resume_from')
    if resume_from is None and cfg.get('auto_resume'):
        resume_from = find_latest_checkpoint(cfg.work_dir)
    if resume_from:
        runner.resume(resume_from)
    elif cfg.get('load_from'):
        runner.load_checkpoint(cfg.load_from)
    runner.run(data_loaders, cfg.workflow)
    return runner
