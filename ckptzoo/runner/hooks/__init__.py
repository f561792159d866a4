from .hook import Hook
from .checkpoint import CheckpointHook
from .evaluation import DistEvalHook, EvalHook
from .iter_timer import IterTimerHook
from .logger import LoggerHook, TensorboardLoggerHook, TextLoggerHook
from .lr_updater import (CosineAnnealingLrUpdaterHook, FixedLrUpdaterHook, LrUpdaterHook,
                         PolyLrUpdaterHook, StepLrUpdaterHook, build_lr_hook)
from .sampler_seed import DistSamplerSeedHook

__all__ = ['Hook']
__all__ += ['CheckpointHook', 'EvalHook', 'DistEvalHook', 'IterTimerHook', 'LoggerHook',
            'TextLoggerHook', 'TensorboardLoggerHook', 'LrUpdaterHook', 'StepLrUpdaterHook',
            'CosineAnnealingLrUpdaterHook', 'PolyLrUpdaterHook', 'FixedLrUpdaterHook',
            'build_lr_hook', 'DistSamplerSeedHook']
