"""mmcv 1.x's merge cells of NAS-FPN and NAS-FCOS (``mmcv.ops.merge_cells``): two inputs, each
through an optional 3x3 ConvModule, resized to a common size, merged by the cell's binary op
(sum, concatenation, global-pooling attention), then an optional ``out_conv``.

Keys are mmcv's (``input1_conv.conv.*``, ``input2_conv.conv.*``, ``out_conv.conv.*``,
``out_conv.bn.*``), so NAS-FPN / NAS-FCOS checkpoints load unchanged.
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from .conv_module import ConvModule

__all__ = ['BaseMergeCell', 'SumCell', 'ConcatCell', 'GlobalPoolingCell']

_UPSAMPLE_MODES = ('nearest', 'bilinear')


class BaseMergeCell(nn.Module):
    """Args (mmcv's):
        fused_channels (int): channels of the merged feature (``out_conv``'s input).
        out_channels (int): channels of ``out_conv``'s output and of the input convs.
        with_out_conv (bool): run ``out_conv`` on the merged feature.
        out_conv_cfg (dict): ``groups``, ``kernel_size``, ``padding``, ``bias`` of ``out_conv``.
        out_norm_cfg (dict | None): norm of ``out_conv``.
        out_conv_order (tuple): order of ``out_conv``'s conv / norm / act (its act is ReLU).
        with_input1_conv, with_input2_conv (bool): a 3x3 ConvModule (with mmcv's default
            ReLU) on the input before resizing; otherwise the input as it is.
        input_conv_cfg, input_norm_cfg (dict | None): of the input convs.
        upsample_mode (str): 'nearest' or 'bilinear', for inputs smaller than the target.
    """

    def __init__(self, fused_channels=256, out_channels=256, with_out_conv=True,
                 out_conv_cfg=dict(groups=1, kernel_size=3, padding=1, bias=True),
                 out_norm_cfg=None, out_conv_order=('act', 'conv', 'norm'),
                 with_input1_conv=False, with_input2_conv=False, input_conv_cfg=None,
                 input_norm_cfg=None, upsample_mode='nearest'):
        super().__init__()
        if upsample_mode not in _UPSAMPLE_MODES:
            raise ValueError(f"upsample_mode must be 'nearest' or 'bilinear', "
                             f'got {upsample_mode!r}')
        self.with_out_conv = with_out_conv
        self.with_input1_conv = with_input1_conv
        self.with_input2_conv = with_input2_conv
        self.upsample_mode = upsample_mode
        if with_out_conv:
            self.out_conv = ConvModule(fused_channels, out_channels, **out_conv_cfg,
                                       norm_cfg=out_norm_cfg, order=out_conv_order)
        self.input1_conv = self._input_conv(out_channels, input_conv_cfg, input_norm_cfg) \
            if with_input1_conv else nn.Sequential()
        self.input2_conv = self._input_conv(out_channels, input_conv_cfg, input_norm_cfg) \
            if with_input2_conv else nn.Sequential()

    @staticmethod
    def _input_conv(channels, conv_cfg, norm_cfg):
        return ConvModule(channels, channels, 3, padding=1, conv_cfg=conv_cfg,
                          norm_cfg=norm_cfg, bias=True)

    def _binary_op(self, x1, x2):
        raise NotImplementedError

    def _resize(self, x, size):
        """Same size: ``x``; smaller (compared as mmcv compares, ``(h, w)`` tuples): upsampled;
        larger: zero-padded (centred) to a multiple of ``size`` and max-pooled down to it."""
        size = tuple(size)
        if tuple(x.shape[-2:]) == size:
            return x
        if tuple(x.shape[-2:]) < size:
            return F.interpolate(x, size=size, mode=self.upsample_mode)
        h, w = x.shape[-2:]
        if h % size[0] or w % size[1]:
            pad_h = math.ceil(h / size[0]) * size[0] - h
            pad_w = math.ceil(w / size[1]) * size[1] - w
            x = F.pad(x, (pad_w // 2, pad_w - pad_w // 2, pad_h // 2, pad_h - pad_h // 2))
        kernel = (x.shape[-2] // size[0], x.shape[-1] // size[1])
        return F.max_pool2d(x, kernel_size=kernel, stride=kernel)

    def forward(self, x1, x2, out_size=None):
        if x1.shape[:2] != x2.shape[:2]:
            raise ValueError(f'{type(self).__name__} inputs must agree in batch and channels, '
                             f'got {tuple(x1.shape)} and {tuple(x2.shape)}')
        if out_size is None:  # the larger of the two
            out_size = max(tuple(x1.shape[2:]), tuple(x2.shape[2:]))
        elif len(out_size) != 2:
            raise ValueError(f'out_size must be (h, w), got {out_size!r}')
        x1 = self._resize(self.input1_conv(x1), out_size)
        x2 = self._resize(self.input2_conv(x2), out_size)
        x = self._binary_op(x1, x2)
        return self.out_conv(x) if self.with_out_conv else x


class SumCell(BaseMergeCell):
    """``x1 + x2``."""

    def __init__(self, in_channels, out_channels, **kwargs):
        super().__init__(in_channels, out_channels, **kwargs)

    def _binary_op(self, x1, x2):
        return x1 + x2


class ConcatCell(BaseMergeCell):
    """``cat([x1, x2])``; ``out_conv`` takes ``2 * in_channels``."""

    def __init__(self, in_channels, out_channels, **kwargs):
        super().__init__(in_channels * 2, out_channels, **kwargs)

    def _binary_op(self, x1, x2):
        return torch.cat([x1, x2], dim=1)


class GlobalPoolingCell(BaseMergeCell):
    """``x2 + sigmoid(global average of x2) * x1`` (NAS-FPN's attention merge)."""

    def __init__(self, in_channels=None, out_channels=None, **kwargs):
        super().__init__(in_channels, out_channels, **kwargs)
        self.global_pool = nn.AdaptiveAvgPool2d((1, 1))

    def _binary_op(self, x1, x2):
        return x2 + self.global_pool(x2).sigmoid() * x1
