from .hook import Hook
from .optimizer import (Fp16OptimizerHook, GradientCumulativeFp16OptimizerHook,
                        GradientCumulativeOptimizerHook, OptimizerHook)

__all__ = ['Hook', 'OptimizerHook', 'Fp16OptimizerHook', 'GradientCumulativeOptimizerHook',
           'GradientCumulativeFp16OptimizerHook']
