"""mmcv 1.x's BaseRunner: hooks, the iteration, lr queries shared by the two runners; its
checkpoints (``save_checkpoint``, ``resume``, ``load_checkpoint``, and the fixes over mmcv that
make a resume exact) are :class:`~ckptzoo.runner.checkpoint_mixin.CheckpointMixin`.

Faults: SIGTERM / SIGINT stop the run between iterations with a resumable checkpoint, or at
once on a second signal or after a grace period, never in the middle of a save
(:mod:`.preemption`); the runner remembers the newest checkpoint with finite weights
(:mod:`.finite`).
"""
import glob
import logging
import os
import os.path as osp
import re
import time
from collections import OrderedDict

import torch
import torch.distributed as dist
from mmengine.dist import get_dist_info

from ..registry import HOOKS, build_hook
from .checkpoint_match import optimizer_hparams
from .checkpoint_mixin import CheckpointMixin
from .hooks import Hook
from .log_buffer import LogBuffer
from .preemption import PreemptionFlag, TrainingPreempted, shield_workers
from .priority import get_priority
from .utils import unwrap_model
from .work_dir import check_work_dir

__all__ = ['BaseRunner']


class BaseRunner(CheckpointMixin):
    """Args as mmcv 1.x: ``model`` (has ``train_step``/``val_step``), ``optimizer`` (an optimizer,
    a dict of them, or None), ``work_dir``, ``logger``, ``meta`` (dict), and one of
    ``max_iters`` / ``max_epochs``."""

    def __init__(self, model, batch_processor=None, optimizer=None, work_dir=None, logger=None,
                 meta=None, max_iters=None, max_epochs=None):
        if batch_processor is not None:
            raise TypeError('batch_processor is not supported: implement model.train_step')
        inner = unwrap_model(model)
        for name in ('train_step', 'val_step'):
            if not callable(getattr(inner, name, None)):
                raise TypeError(f'the model ({type(inner).__name__}) must have a {name}() method')
        if isinstance(optimizer, dict):
            for name, optim in optimizer.items():
                if not isinstance(optim, torch.optim.Optimizer):
                    raise TypeError(f'optimizer["{name}"] must be a torch Optimizer, '
                                    f'got {type(optim).__name__}')
        elif optimizer is not None and not isinstance(optimizer, torch.optim.Optimizer):
            raise TypeError('optimizer must be a torch Optimizer, a dict of them or None, '
                            f'got {type(optimizer).__name__}')
        if logger is None:
            logger = logging.getLogger('ckptzoo')
        if not isinstance(logger, logging.Logger):
            raise TypeError(f'logger must be a logging.Logger, got {type(logger).__name__}')
        if meta is not None and not isinstance(meta, dict):
            raise TypeError(f'meta must be a dict or None, got {type(meta).__name__}')
        if max_epochs is not None and max_iters is not None:
            raise ValueError('only one of max_epochs and max_iters can be set, got '
                             f'max_epochs={max_epochs} and max_iters={max_iters}')
        for name, value in (('max_epochs', max_epochs), ('max_iters', max_iters)):
            if value is not None and (not isinstance(value, int) or isinstance(value, bool)
                                      or value < 1):
                raise ValueError(f'{name} must be a positive int, got {value!r}')
        if isinstance(work_dir, str):  # '~' expanded; '' refused (mmcv took the current dir)
            self.work_dir = osp.abspath(check_work_dir(work_dir))
            os.makedirs(self.work_dir, exist_ok=True)
        elif work_dir is None:
            self.work_dir = None
        else:
            raise TypeError(f'work_dir must be a str or None, got {type(work_dir).__name__}')

        self.model = model
        self.optimizer = optimizer
        # as configured, before any schedule: saved with each checkpoint for a resume to compare
        self._optimizer_hparams = None if optimizer is None else optimizer_hparams(optimizer)
        self.logger = logger
        self.meta = meta
        self._model_name = type(inner).__name__
        self._rank, self._world_size = get_dist_info()
        self.timestamp = time.strftime('%Y%m%d_%H%M%S', time.localtime())
        self.mode = None
        self._hooks = []
        self._epoch = 0
        self._iter = 0
        self._inner_iter = 0
        self._max_epochs = max_epochs
        self._max_iters = max_iters
        self._resume_inner_iter = 0  # batches of the current epoch already trained (resume)
        self._in_train_iter = False  # between train_step and the iteration counter's increment
        self._last_finite_ckpt = None
        self.resumed_from = None  # the checkpoint path given to resume() (hooks name it)
        self._preemption = PreemptionFlag(last_checkpoint=self._latest_checkpoint,
                                          logger=logger)
        self.data_loader = None
        self.outputs = {}
        self.log_buffer = LogBuffer()

    # -- attributes -------------------------------------------------------------------------
    @property
    def model_name(self):
        return self._model_name

    @property
    def rank(self):
        return self._rank

    @property
    def world_size(self):
        return self._world_size

    @property
    def hooks(self):
        return self._hooks

    @property
    def epoch(self):
        return self._epoch

    @property
    def iter(self):
        return self._iter

    @property
    def inner_iter(self):
        return self._inner_iter

    @property
    def max_epochs(self):
        return self._max_epochs

    @property
    def max_iters(self):
        return self._max_iters

    @property
    def last_finite_checkpoint(self):
        """The newest checkpoint this run (or the one it resumed) wrote with finite weights."""
        return self._last_finite_ckpt

    # -- to be implemented ------------------------------------------------------------------
    def train(self, data_loader, **kwargs):
        raise NotImplementedError

    def val(self, data_loader, **kwargs):
        raise NotImplementedError

    def run(self, data_loaders, workflow, **kwargs):
        raise NotImplementedError

    def _checkpoint_position(self):
        """``(completed epochs, completed iterations, completed iterations of this epoch)``."""
        raise NotImplementedError

    # -- preemption -------------------------------------------------------------------------
    def _check_preemption(self):
        """If any rank got SIGTERM / SIGINT: save a resumable checkpoint (rank 0; the others
        wait at a barrier) and raise :class:`TrainingPreempted`. A collective call: the
        runners call it at the same points on every rank."""
        signum = self._preemption.agreed()
        if not signum:
            return
        epochs, iters, _ = self._checkpoint_position()
        out_dir = self._checkpoint_dir()
        path = None
        if out_dir is not None:
            path = osp.join(out_dir, f'preempted_iter_{iters}.pth')
            self.gather_for_save()
            if self.rank == 0:
                self.save_checkpoint(out_dir, filename_tmpl='preempted_iter_{}.pth')
                for old in glob.glob(osp.join(out_dir, 'preempted_iter_*.pth')):
                    if re.fullmatch(r'preempted_iter_\d+\.pth', osp.basename(old)) \
                            and osp.abspath(old) != osp.abspath(path):
                        os.remove(old)
            if dist.is_available() and dist.is_initialized() and self.world_size > 1:
                dist.barrier()
        exc = TrainingPreempted(signum, path)
        self._preemption.stop_agreed(exc)  # every rank stops, the checkpoint is complete
        self.logger.warning(f'{exc} (after {iters} iterations, {epochs} epochs); continue '
                            'with --auto-resume')
        raise exc

    def _preemptible(self, data_loaders):
        """The ``with`` block of a run: signal handlers set, DataLoader workers shielded."""
        shield_workers(list(data_loaders) + [getattr(h, 'dataloader', None)
                                             for h in self._hooks])
        return self._preemption

    # -- one iteration ----------------------------------------------------------------------
    def run_iter(self, data_batch, train_mode, **kwargs):
        if train_mode:
            outputs = self.model.train_step(data_batch, self.optimizer, **kwargs)
        else:
            with torch.no_grad():
                outputs = self.model.val_step(data_batch, self.optimizer, **kwargs)
        if not isinstance(outputs, dict):
            raise TypeError(f'model.train_step() / val_step() must return a dict, got '
                            f'{type(outputs).__name__}')
        if 'log_vars' in outputs:
            self.log_buffer.update(outputs['log_vars'], outputs.get('num_samples', 1))
        self.outputs = outputs

    # -- learning rate ----------------------------------------------------------------------
    def _param_group_values(self, key):
        def values(optim):
            return [group[key] if key in group else group.get('betas', (None, ))[0]
                    for group in optim.param_groups]

        if self.optimizer is None:
            raise RuntimeError(f'{key} is not applicable because optimizer does not exist.')
        if isinstance(self.optimizer, dict):
            return {name: values(optim) for name, optim in self.optimizer.items()}
        return values(self.optimizer)

    def current_lr(self):
        """The lr of every param group: a list, or a dict of lists for a dict of optimizers."""
        return self._param_group_values('lr')

    def current_momentum(self):
        """Momentum (or Adam's beta1) of every param group, as :meth:`current_lr`."""
        return self._param_group_values('momentum')

    # -- hooks ------------------------------------------------------------------------------
    def register_hook(self, hook, priority='NORMAL'):
        """Insert ``hook`` after every hook of higher or equal priority (mmcv's order)."""
        if not isinstance(hook, Hook):
            raise TypeError(f'hook must be a Hook, got {type(hook).__name__}')
        if hasattr(hook, 'priority'):
            raise ValueError(f'"priority" is a reserved attribute of hooks ({hook!r})')
        hook.priority = get_priority(priority)
        index = 0
        for i in range(len(self._hooks) - 1, -1, -1):
            if hook.priority >= self._hooks[i].priority:
                index = i + 1
                break
        self._hooks.insert(index, hook)

    def register_hook_from_cfg(self, hook_cfg):
        if not isinstance(hook_cfg, dict):
            raise TypeError(f'a hook config must be a dict, got {hook_cfg!r}')
        hook_cfg = dict(hook_cfg)
        priority = hook_cfg.pop('priority', 'NORMAL')
        self.register_hook(build_hook(hook_cfg), priority=priority)

    def call_hook(self, fn_name, *args):
        for hook in self._hooks:
            getattr(hook, fn_name)(self, *args)

    def get_hook_info(self):
        stage_hooks = OrderedDict((stage, []) for stage in Hook.stages)
        for hook in self.hooks:
            for stage in hook.get_triggered_stages():
                stage_hooks[stage].append(f'({hook.priority:<3}) {type(hook).__name__}')
        return '\n'.join(f'{stage}:\n' + '\n'.join(names) + '\n' + '-' * 20
                         for stage, names in stage_hooks.items() if names)

    def _register(self, cfg, default_type=None, priority='NORMAL', **defaults):
        """A hook from a config dict (type defaulting to ``default_type``) or an instance."""
        if cfg is None:
            return
        if isinstance(cfg, Hook):
            self.register_hook(cfg, priority=priority)
            return
        if not isinstance(cfg, dict):
            raise TypeError(f'a hook config must be a dict or a Hook, got {cfg!r}')
        cfg = dict(cfg)
        cfg.setdefault('type', default_type)
        for key, value in defaults.items():
            cfg.setdefault(key, value)
        self.register_hook(HOOKS.build(cfg), priority=priority)

    def register_lr_hook(self, lr_config):
        if lr_config is None or isinstance(lr_config, Hook):
            return self._register(lr_config, priority='VERY_HIGH')
        from .hooks.lr_updater import build_lr_hook
        self.register_hook(build_lr_hook(lr_config), priority='VERY_HIGH')

    def register_momentum_hook(self, momentum_config):
        if momentum_config is None or isinstance(momentum_config, Hook):
            return self._register(momentum_config, priority='HIGH')
        from .hooks.momentum_updater import build_momentum_hook
        self.register_hook(build_momentum_hook(momentum_config), priority='HIGH')

    def register_optimizer_hook(self, optimizer_config):
        self._register(optimizer_config, 'OptimizerHook', priority='ABOVE_NORMAL')

    def register_checkpoint_hook(self, checkpoint_config):
        self._register(checkpoint_config, 'CheckpointHook', priority='NORMAL')

    def register_logger_hooks(self, log_config):
        if log_config is None:
            return
        interval = log_config['interval']
        for info in log_config['hooks']:
            info = dict(info)
            info.setdefault('interval', interval)
            self.register_hook(build_hook(info), priority='VERY_LOW')

    def register_timer_hook(self, timer_config):
        self._register(timer_config, 'IterTimerHook', priority='LOW')

    def register_custom_hooks(self, custom_config):
        if custom_config is None:
            return
        if not isinstance(custom_config, (list, tuple)):
            custom_config = [custom_config]
        for item in custom_config:
            if isinstance(item, Hook):
                self.register_hook(item, priority='NORMAL')
            else:
                self.register_hook_from_cfg(item)

    def register_profiler_hook(self, profiler_config):
        self._register(profiler_config, 'ProfilerHook')

    def register_training_hooks(self, lr_config, optimizer_config=None, checkpoint_config=None,
                                log_config=None, momentum_config=None,
                                timer_config=dict(type='IterTimerHook'),
                                custom_hooks_config=None):
        """mmcv 1.x's order: lr (VERY_HIGH), momentum (HIGH), optimizer (ABOVE_NORMAL),
        checkpoint (NORMAL), timer (LOW), custom hooks, loggers (VERY_LOW)."""
        self.register_lr_hook(lr_config)
        self.register_momentum_hook(momentum_config)
        self.register_optimizer_hook(optimizer_config)
        self.register_checkpoint_hook(checkpoint_config)
        self.register_timer_hook(timer_config)
        self.register_logger_hooks(log_config)
        self.register_custom_hooks(custom_hooks_config)
