from .base import LoggerHook
from .tensorboard import TensorboardLoggerHook
from .text import TextLoggerHook

__all__ = ['LoggerHook', 'TextLoggerHook', 'TensorboardLoggerHook']
