"""mmcv's ``Conv2dAdaptivePadding`` (conv type ``'Conv2dAdaptivePadding'``): TensorFlow's
"SAME" padding, computed from each input's size, which EfficientNet's weights expect."""
import math

import torch.nn as nn
import torch.nn.functional as F

from .builder import CONV_LAYERS

__all__ = ['Conv2dAdaptivePadding']


class Conv2dAdaptivePadding(nn.Conv2d):
    """A conv whose output is ``ceil(input / stride)`` wide: the input is padded (the extra
    pixel, if any, at the bottom / right) before a conv without padding; ``padding`` is
    ignored, as in mmcv."""

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0,
                 dilation=1, groups=1, bias=True):
        super().__init__(in_channels, out_channels, kernel_size, stride, 0, dilation, groups,
                         bias)

    def forward(self, x):
        pads = []
        for size, k, s, d in zip(x.shape[-2:], self.weight.shape[-2:], self.stride,
                                 self.dilation):
            pads.append(max((math.ceil(size / s) - 1) * s + (k - 1) * d + 1 - size, 0))
        pad_h, pad_w = pads
        if pad_h > 0 or pad_w > 0:
            x = F.pad(x, [pad_w // 2, pad_w - pad_w // 2, pad_h // 2, pad_h - pad_h // 2])
        return F.conv2d(x, self.weight, self.bias, self.stride, self.padding, self.dilation,
                        self.groups)


CONV_LAYERS['Conv2dAdaptivePadding'] = Conv2dAdaptivePadding
