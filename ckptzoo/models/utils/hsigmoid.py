"""mmcv 1.x ``HSigmoid`` (registered as the activation ``'HSigmoid'``): the hard sigmoid
``clamp((x + bias) / divisor, min_value, max_value)``, mmcv >= 1.4.4's defaults (PyTorch's
``hardsigmoid``). DyHead's scale attention and DyReLU use it."""
import torch.nn as nn

from .conv_module import ACTIVATIONS

__all__ = ['HSigmoid']


class HSigmoid(nn.Module):
    """Args (mmcv's): ``bias`` (3.0), ``divisor`` (6.0), ``min_value`` (0.0), ``max_value``
    (1.0)."""

    def __init__(self, bias=3.0, divisor=6.0, min_value=0.0, max_value=1.0):
        super().__init__()
        if divisor == 0:
            raise ValueError('HSigmoid divisor must not be 0')
        self.bias = bias
        self.divisor = divisor
        self.min_value = min_value
        self.max_value = max_value

    def forward(self, x):
        return ((x + self.bias) / self.divisor).clamp(self.min_value, self.max_value)


ACTIVATIONS.setdefault('HSigmoid', HSigmoid)
