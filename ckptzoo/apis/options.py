"""The three run-wide memory savers besides checkpointing, read from and written to a config.

``fp16``, ``cumulative_iters`` and ``samples_per_gpu`` live in three places of an mmdet 2.x
config (``fp16 = dict(...)``, ``optimizer_config``, ``data`` / ``data.train_dataloader``), and
together choose the optimizer hook (:func:`select_optimizer_hook`). This module is the one
place that knows how they combine: the training assembly, the memory planner's outer search
and the benchmarks all read and set them through :class:`TrainingOptions`.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Mapping

from mmengine.config import Config

from ..runner.hooks import Hook

__all__ = ['TrainingOptions', 'select_optimizer_hook', 'cumulative_iters_of',
           'samples_per_gpu_of', 'DEFAULT_FP16']

#: the optimizer hooks :func:`select_optimizer_hook` chooses between (mmcv 1.x's names)
OPTIMIZER_HOOKS = ('OptimizerHook', 'Fp16OptimizerHook', 'GradientCumulativeOptimizerHook',
                   'GradientCumulativeFp16OptimizerHook')

#: What ``fp16`` becomes when a search switches it on and the config has none.
DEFAULT_FP16: dict[str, Any] = dict(loss_scale='dynamic')


@dataclass(frozen=True)
class TrainingOptions:
    """``fp16`` on or off, the gradient-accumulation window and the per-GPU batch of a run.

    ``cumulative_iters`` iterations of ``samples_per_gpu`` images make one optimizer update
    (mmcv semantics: the lr is unchanged).
    """

    fp16: bool = False
    cumulative_iters: int = 1
    samples_per_gpu: int = 1

    def __post_init__(self):
        for name in ('cumulative_iters', 'samples_per_gpu'):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f'{name} must be a positive int, got {value!r}')
        if not isinstance(self.fp16, bool):
            raise TypeError(f'fp16 must be a bool here, got {self.fp16!r}')

    @classmethod
    def from_cfg(cls, cfg: Config) -> TrainingOptions:
        """The options a config trains with (``data.train_dataloader.samples_per_gpu`` wins
        over ``data.samples_per_gpu``, as in mmdet 2.x's ``build_dataloader`` call)."""
        return cls(fp16=cfg.get('fp16') is not None,
                   cumulative_iters=cumulative_iters_of(cfg.get('optimizer_config')),
                   samples_per_gpu=samples_per_gpu_of(cfg))

    @classmethod
    def from_dict(cls, options: Mapping[str, Any]) -> TrainingOptions:
        """From ``{'fp16', 'cumulative_iters', 'samples_per_gpu'}`` (a plan file's record)."""
        return cls(fp16=bool(options['fp16']), cumulative_iters=int(options['cumulative_iters']),
                   samples_per_gpu=int(options['samples_per_gpu']))

    def to_dict(self) -> dict[str, Any]:
        """``{'fp16', 'cumulative_iters', 'samples_per_gpu'}``, as plan files record them."""
        return asdict(self)

    def apply_to(self, cfg: Config, fp16_cfg: Mapping[str, Any] | None = None) -> Config:
        """Set these options in ``cfg`` (in place) and return it.

        ``fp16`` switched on keeps the config's own ``fp16`` dict, else uses ``fp16_cfg``
        (default ``dict(loss_scale='dynamic')``); switched off removes it.
        """
        if self.fp16:
            if cfg.get('fp16') is None or fp16_cfg is not None:
                cfg.fp16 = dict(fp16_cfg if fp16_cfg is not None else DEFAULT_FP16)
        elif cfg.get('fp16') is not None:
            cfg.fp16 = None
        opt = cfg.get('optimizer_config')
        if self.cumulative_iters != cumulative_iters_of(opt):
            if opt is not None and not isinstance(opt, Mapping):
                raise TypeError(f'cumulative_iters={self.cumulative_iters} needs '
                                f'optimizer_config as a dict, got {opt!r}')
            cfg.optimizer_config = dict(opt or {}, cumulative_iters=self.cumulative_iters)
        cfg.data.samples_per_gpu = self.samples_per_gpu
        if 'samples_per_gpu' in (cfg.data.get('train_dataloader') or {}):
            cfg.data.train_dataloader.samples_per_gpu = self.samples_per_gpu
        return cfg

    def describe(self) -> str:
        """``'fp16=..., cumulative_iters=..., samples_per_gpu=...'`` for messages."""
        return (f'fp16={self.fp16}, cumulative_iters={self.cumulative_iters}, '
                f'samples_per_gpu={self.samples_per_gpu}')


def cumulative_iters_of(optimizer_config: Any) -> int:
    """The accumulation window an ``optimizer_config`` asks for (1 when none)."""
    if not isinstance(optimizer_config, Mapping):
        return 1
    return int(optimizer_config.get('cumulative_iters', 1))


def samples_per_gpu_of(cfg: Config) -> int:
    """The training loader's per-GPU batch: ``data.train_dataloader.samples_per_gpu``, else
    ``data.samples_per_gpu``, else 2 (mmdet 2.x's loader default)."""
    loader = cfg.data.get('train_dataloader') or {}
    return int(loader.get('samples_per_gpu', cfg.data.get('samples_per_gpu', 2)))


def select_optimizer_hook(optimizer_config: Mapping[str, Any] | Hook | None,
                          fp16_cfg: Mapping[str, Any] | None = None,
                          distributed: bool = False) -> dict[str, Any] | Hook:
    """The optimizer hook config from ``optimizer_config`` and ``fp16``.

    ``fp16`` and ``cumulative_iters`` (a key, or the accumulating ``type``) give
    ``GradientCumulativeFp16OptimizerHook``; only ``fp16`` gives ``Fp16OptimizerHook``; only
    ``cumulative_iters`` ``GradientCumulativeOptimizerHook``; neither ``OptimizerHook`` (or the
    config's own type). The ``fp16`` dict's keys (``loss_scale``, ...) become the hook's
    arguments, and an fp16 hook gets ``distributed``. A hook instance is used as it is (no
    ``fp16`` then); a custom ``type`` cannot take ``fp16``. mmdet 2.x crashes on the first
    combination.
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
    if hook_type is not None and hook_type not in OPTIMIZER_HOOKS:
        if fp16_cfg is not None:
            raise ValueError(f'fp16 cannot be combined with the custom optimizer hook '
                             f'{hook_type!r}: use one of {", ".join(OPTIMIZER_HOOKS)}')
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
