from .checkpoint import CheckpointHook
from .ema import BaseEMAHook, EMAHook, ExpMomentumEMAHook, LinearMomentumEMAHook
from .evaluation import DistEvalHook, EvalHook
from .hook import Hook
from .iter_timer import IterTimerHook
from .logger import (LoggerHook, MlflowLoggerHook, TensorboardLoggerHook, TextLoggerHook,
                     WandbLoggerHook)
from .num_class_check import NumClassCheckHook
from .lr_updater import (CosineAnnealingLrUpdaterHook, FixedLrUpdaterHook, LrUpdaterHook,
                         PolyLrUpdaterHook, StepLrUpdaterHook, build_lr_hook)
from .optimizer import (Fp16OptimizerHook, GradientCumulativeFp16OptimizerHook,
                        GradientCumulativeOptimizerHook, OptimizerHook)
from .sampler_seed import DistSamplerSeedHook

__all__ = ['Hook', 'CheckpointHook', 'EvalHook', 'DistEvalHook', 'IterTimerHook', 'LoggerHook',
           'TextLoggerHook', 'TensorboardLoggerHook', 'LrUpdaterHook', 'StepLrUpdaterHook',
           'CosineAnnealingLrUpdaterHook', 'PolyLrUpdaterHook', 'FixedLrUpdaterHook',
           'build_lr_hook', 'DistSamplerSeedHook', 'NumClassCheckHook', 'OptimizerHook', 'Fp16OptimizerHook',
           'GradientCumulativeOptimizerHook', 'GradientCumulativeFp16OptimizerHook',
           'WandbLoggerHook', 'MlflowLoggerHook', 'BaseEMAHook', 'EMAHook', 'ExpMomentumEMAHook',
           'LinearMomentumEMAHook']
