"""mmcv 1.x's ``ConvWS2d`` (``mmcv/cnn/bricks/conv_ws.py``): a 2d convolution whose weight is
standardised per output channel (mean 0, std 1 with ``eps`` added to the std) at every forward,
registered as ``'ConvWS'`` (``conv_cfg=dict(type='ConvWS')``, mmdet's ``gn+ws/`` configs).
Keys are ``nn.Conv2d``'s (``weight``, ``bias``)."""
import torch.nn as nn
import torch.nn.functional as F

from .builder import CONV_LAYERS

__all__ = ['conv_ws_2d', 'ConvWS2d']


def conv_ws_2d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1, eps=1e-5):
    """``F.conv2d`` with ``weight`` standardised per output channel (unbiased std, as mmcv)."""
    out_channels = weight.size(0)
    flat = weight.reshape(out_channels, -1)
    mean = flat.mean(dim=1, keepdim=True).reshape(out_channels, 1, 1, 1)
    std = flat.std(dim=1, keepdim=True).reshape(out_channels, 1, 1, 1)
    return F.conv2d(input, (weight - mean) / (std + eps), bias, stride, padding, dilation,
                    groups)


class ConvWS2d(nn.Conv2d):
    """mmcv's ``ConvWS2d``: ``nn.Conv2d``'s arguments (no ``padding_mode``) and ``eps``."""

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1,
                 groups=1, bias=True, eps=1e-5):
        super().__init__(in_channels, out_channels, kernel_size, stride=stride, padding=padding,
                         dilation=dilation, groups=groups, bias=bias)
        self.eps = eps

    def forward(self, x):
        return conv_ws_2d(x, self.weight, self.bias, self.stride, self.padding, self.dilation,
                          self.groups, self.eps)


CONV_LAYERS['ConvWS'] = ConvWS2d
