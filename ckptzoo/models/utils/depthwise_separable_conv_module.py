"""mmcv's ``DepthwiseSeparableConvModule``: a depthwise ConvModule then a pointwise one
(keys ``depthwise_conv.*`` and ``pointwise_conv.*``), used by YOLOX's and SSDLite's layers."""
import torch.nn as nn

from .conv_module import ConvModule

__all__ = ['DepthwiseSeparableConvModule']


class DepthwiseSeparableConvModule(nn.Module):
    """``dw_norm_cfg`` / ``dw_act_cfg`` / ``pw_norm_cfg`` / ``pw_act_cfg`` default
    (``'default'``) to ``norm_cfg`` / ``act_cfg``; other keyword arguments go to both
    ConvModules, as in mmcv."""

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1,
                 norm_cfg=None, act_cfg=dict(type='ReLU'), dw_norm_cfg='default',
                 dw_act_cfg='default', pw_norm_cfg='default', pw_act_cfg='default', **kwargs):
        super().__init__()
        if 'groups' in kwargs:
            raise ValueError('DepthwiseSeparableConvModule takes no groups (the depthwise conv '
                             f'has in_channels groups), got groups={kwargs["groups"]!r}')

        def pick(value, default):
            return default if isinstance(value, str) and value == 'default' else value

        self.depthwise_conv = ConvModule(
            in_channels, in_channels, kernel_size, stride=stride, padding=padding,
            dilation=dilation, groups=in_channels, norm_cfg=pick(dw_norm_cfg, norm_cfg),
            act_cfg=pick(dw_act_cfg, act_cfg), **kwargs)
        self.pointwise_conv = ConvModule(
            in_channels, out_channels, 1, norm_cfg=pick(pw_norm_cfg, norm_cfg),
            act_cfg=pick(pw_act_cfg, act_cfg), **kwargs)

    def forward(self, x):
        return self.pointwise_conv(self.depthwise_conv(x))
