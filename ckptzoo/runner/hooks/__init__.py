from .checkpoint import CheckpointHook
from .ema import BaseEMAHook, EMAHook, ExpMomentumEMAHook, LinearMomentumEMAHook
from .evaluation import DistEvalHook, EvalHook
from .hook import Hook
from .iter_timer import IterTimerHook
from .logger import (LoggerHook, MlflowLoggerHook, TensorboardLoggerHook, TextLoggerHook,
                     WandbLoggerHook)
from .num_class_check import NumClassCheckHook
from .lr_cyclic import CyclicLrUpdaterHook, OneCycleLrUpdaterHook
from .lr_updater import (CosineAnnealingLrUpdaterHook, CosineRestartLrUpdaterHook,
                         ExpLrUpdaterHook, FixedLrUpdaterHook, FlatCosineAnnealingLrUpdaterHook,
                         InvLrUpdaterHook, LinearAnnealingLrUpdaterHook, LrUpdaterHook,
                         PolyLrUpdaterHook, StepLrUpdaterHook, build_lr_hook)
from .momentum_updater import (CosineAnnealingMomentumUpdaterHook, CyclicMomentumUpdaterHook,
                               LinearAnnealingMomentumUpdaterHook, MomentumUpdaterHook,
                               OneCycleMomentumUpdaterHook, StepMomentumUpdaterHook,
                               build_momentum_hook)
from .optimizer import (Fp16OptimizerHook, GradientCumulativeFp16OptimizerHook,
                        GradientCumulativeOptimizerHook, OptimizerHook)
from .sampler_seed import DistSamplerSeedHook

__all__ = ['Hook', 'CheckpointHook', 'EvalHook', 'DistEvalHook', 'IterTimerHook', 'LoggerHook',
           'TextLoggerHook', 'TensorboardLoggerHook', 'LrUpdaterHook', 'StepLrUpdaterHook',
           'CosineAnnealingLrUpdaterHook', 'PolyLrUpdaterHook', 'FixedLrUpdaterHook',
           'build_lr_hook', 'ExpLrUpdaterHook', 'InvLrUpdaterHook', 'CosineRestartLrUpdaterHook',
           'FlatCosineAnnealingLrUpdaterHook', 'LinearAnnealingLrUpdaterHook',
           'CyclicLrUpdaterHook', 'OneCycleLrUpdaterHook', 'MomentumUpdaterHook',
           'StepMomentumUpdaterHook', 'CosineAnnealingMomentumUpdaterHook',
           'LinearAnnealingMomentumUpdaterHook', 'CyclicMomentumUpdaterHook',
           'OneCycleMomentumUpdaterHook', 'build_momentum_hook', 'DistSamplerSeedHook',
           'NumClassCheckHook', 'OptimizerHook', 'Fp16OptimizerHook',
           'GradientCumulativeOptimizerHook', 'GradientCumulativeFp16OptimizerHook',
           'WandbLoggerHook', 'MlflowLoggerHook', 'BaseEMAHook', 'EMAHook', 'ExpMomentumEMAHook',
           'LinearMomentumEMAHook']

from .set_epoch_info_hook import SetEpochInfoHook  # noqa: E402

__all__ += ['SetEpochInfoHook']

from .sync_norm import SyncNormHook  # noqa: E402
from .yolox_lr_updater import YOLOXLrUpdaterHook  # noqa: E402
from .yolox_mode_switch import YOLOXModeSwitchHook  # noqa: E402

__all__ += ['SyncNormHook', 'YOLOXLrUpdaterHook', 'YOLOXModeSwitchHook']

from .sync_random_size import SyncRandomSizeHook  # noqa: E402

__all__ += ['SyncRandomSizeHook']

from .rfsearch import RFSearchHook, rfnext_init_model  # noqa: E402

__all__ += ['RFSearchHook', 'rfnext_init_model']
