"""mmcv 1.x's ``SAConv2d`` (``mmcv/ops/saconv.py``), registered as ``'SAC'``: DetectoRS's
switchable atrous convolution (Qiao et al. 2020), ``sac=dict(type='SAC', use_deform=True)``.

One ConvAWS weight looks at the input twice, at the given dilation and at three times it (the
large one with ``weight + weight_diff``); a per-pixel ``switch`` (a 1x1 conv on a 5x5
reflect-padded mean of the input) mixes them: ``s * small + (1 - s) * large``. A global context
(1x1 conv of the mean) is added before (``pre_context``) and after (``post_context``). With
``use_deform`` both branches are deformable convs (torchvision's ``deform_conv2d``, mmcv's
offset layout) whose offsets ``offset_s`` / ``offset_l`` predict from the pooled input.

Keys: ``weight`` (``bias``), ``weight_gamma``, ``weight_beta``, ``switch.*``, ``weight_diff``,
``pre_context.*``, ``post_context.*`` (``offset_s.*``, ``offset_l.*``), as mmcv's.
Initialised as mmcv: switch 0 with bias 1 (the small dilation at first), ``weight_diff`` and
the context and offset convs 0. mmcv passes a zero bias to both branches, so ``bias=True``
made a parameter that was never used; here it is added once to the mix (same result as mmcv
for ``bias=False``, which DetectoRS uses).
"""
import torch
import torch.nn as nn
import torch.nn.functional as F
from torchvision.ops import deform_conv2d

from .builder import CONV_LAYERS
from .conv_aws import ConvAWS2d

__all__ = ['SAConv2d']


class SAConv2d(ConvAWS2d):
    """mmcv's ``SAConv2d``: ConvAWS's arguments and ``use_deform`` (3x3 kernels only, as its
    offset convs predict 18 channels)."""

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1,
                 groups=1, bias=True, use_deform=False):
        super().__init__(in_channels, out_channels, kernel_size, stride=stride, padding=padding,
                         dilation=dilation, groups=groups, bias=bias)
        if use_deform and self.kernel_size != (3, 3):
            raise ValueError(f'SAC use_deform needs a 3x3 kernel (its offsets are 2 x 9 '
                             f'channels), got kernel_size={kernel_size!r}')
        self.use_deform = use_deform
        self.switch = nn.Conv2d(in_channels, 1, kernel_size=1, stride=stride, bias=True)
        self.weight_diff = nn.Parameter(torch.empty_like(self.weight))
        self.pre_context = nn.Conv2d(in_channels, in_channels, kernel_size=1, bias=True)
        self.post_context = nn.Conv2d(out_channels, out_channels, kernel_size=1, bias=True)
        if use_deform:
            self.offset_s = nn.Conv2d(in_channels, 18, kernel_size=3, padding=1, stride=stride,
                                      bias=True)
            self.offset_l = nn.Conv2d(in_channels, 18, kernel_size=3, padding=1, stride=stride,
                                      bias=True)
        self.init_weights()

    def init_weights(self):
        """mmcv's: the switch picks the small dilation, the large one shares its weight."""
        with torch.no_grad():
            self.switch.weight.zero_()
            self.switch.bias.fill_(1)
            self.weight_diff.zero_()
            for conv in (self.pre_context, self.post_context) + (
                    (self.offset_s, self.offset_l) if self.use_deform else ()):
                conv.weight.zero_()
                conv.bias.zero_()

    def _branch(self, x, weight, pooled, offset_conv, scale):
        padding = tuple(scale * p for p in self.padding)
        dilation = tuple(scale * d for d in self.dilation)
        if self.use_deform:
            return deform_conv2d(x, offset_conv(pooled), weight, None, stride=self.stride,
                                 padding=padding, dilation=dilation)
        return F.conv2d(x, weight, None, self.stride, padding, dilation, self.groups)

    def forward(self, x):
        if min(x.shape[-2:]) < 3:  # torch's reflect padding of 2 needs 3 pixels (as mmcv)
            raise ValueError(f'SAC needs inputs of at least 3x3 pixels (its switch pools a '
                             f'reflect-padded 5x5 window), got {tuple(x.shape[-2:])}: use a '
                             f'larger image')
        x = x + self.pre_context(F.adaptive_avg_pool2d(x, 1))
        pooled = F.avg_pool2d(F.pad(x, (2, 2, 2, 2), mode='reflect'), kernel_size=5, stride=1)
        switch = self.switch(pooled)
        weight = self._get_weight(self.weight)
        small = self._branch(x, weight, pooled, getattr(self, 'offset_s', None), 1)
        large = self._branch(x, weight + self.weight_diff, pooled,
                             getattr(self, 'offset_l', None), 3)
        out = switch * small + (1 - switch) * large
        if self.bias is not None:
            out = out + self.bias.reshape(1, -1, 1, 1)
        return out + self.post_context(F.adaptive_avg_pool2d(out, 1))

    def extra_repr(self):
        return super().extra_repr() + f', use_deform={self.use_deform}'


CONV_LAYERS['SAC'] = SAConv2d
