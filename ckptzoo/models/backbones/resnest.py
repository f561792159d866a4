"""ResNeSt (mmdet 2.x ``ResNeSt``: arguments, state-dict keys) with exact activation checkpointing.

A ResNetV1d (deep stem, average-pool downsampling) whose Bottleneck's 3x3 conv is a
:class:`SplitAttentionConv2d`: ``radix`` parallel grouped convs, weighted per channel by an
attention computed from their pooled sum (``fc1 -> norm1 -> ReLU -> fc2 -> rsoftmax``). With
``avg_down_stride`` a strided block convolves at stride 1 and pools after (``avd_layer``).
Keys as mmdet's checkpoints (``open-mmlab://resnest50``): ``stem.0 ... layer1.0.conv2.conv``,
``layer1.0.conv2.bn0``, ``layer1.0.conv2.fc1``, ``layer1.0.conv2.bn1``, ``layer1.0.conv2.fc2``,
``layer1.0.downsample.1``. Stem, stages, freezing, ``norm_eval``, plugins and the checkpoint
units (``stem``, ``layer{i}.{j}``; ``with_cp`` sets them to ``'full'``) are ResNet's.
"""
import math
import numbers

import torch
import torch.nn as nn
import torch.nn.functional as F

from ...registry import MODELS
from ..utils import ResLayer, build_conv_layer, build_norm_layer
from .resnet import Bottleneck as _Bottleneck
from .resnet import ResNetV1d

__all__ = ['RSoftmax', 'SplitAttentionConv2d', 'Bottleneck', 'ResNeSt']


def _check_positive_int(owner, name, value, minimum=1):
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        raise ValueError(f'{owner} {name} must be an int >= {minimum}, got {value!r}')


def _refuse_dcn(owner, dcn, stage_with_dcn=()):
    if dcn is not None or any(stage_with_dcn):
        raise NotImplementedError(
            f'{owner} dcn (deformable convs) is not supported yet, got dcn={dcn!r}, '
            f'stage_with_dcn={tuple(stage_with_dcn)!r}')


class RSoftmax(nn.Module):
    """The attention's normalisation: a softmax over the ``radix`` splits of each of the
    ``groups`` cardinal groups, or a sigmoid when ``radix == 1``."""

    def __init__(self, radix, groups):
        super().__init__()
        self.radix = radix
        self.groups = groups

    def forward(self, x):
        batch = x.size(0)
        if self.radix == 1:
            return torch.sigmoid(x)
        # channels are laid out (group, radix, c): the softmax runs across radix
        x = x.view(batch, self.groups, self.radix, -1).transpose(1, 2)
        return F.softmax(x, dim=1).reshape(batch, -1)


class SplitAttentionConv2d(nn.Module):
    """mmdet's Split-Attention conv: ``conv`` (``channels * radix`` outputs in
    ``groups * radix`` groups) -> ``norm0`` -> ReLU, then each split weighted by its
    attention and summed. The attention's hidden width is ``max(in_channels * radix //
    reduction_factor, 32)``; ``fc1`` / ``fc2`` are plain biased 1x1 convs (``conv_cfg`` builds
    only ``conv``, as mmdet)."""

    def __init__(self, in_channels, channels, kernel_size, stride=1, padding=0, dilation=1,
                 groups=1, radix=2, reduction_factor=4, conv_cfg=None,
                 norm_cfg=dict(type='BN'), dcn=None, init_cfg=None):
        super().__init__()
        _refuse_dcn('SplitAttentionConv2d', dcn)
        _check_positive_int('SplitAttentionConv2d', 'radix', radix)
        _check_positive_int('SplitAttentionConv2d', 'groups', groups)
        _check_positive_int('SplitAttentionConv2d', 'reduction_factor', reduction_factor)
        inter_channels = max(in_channels * radix // reduction_factor, 32)
        self.radix = radix
        self.groups = groups
        self.channels = channels
        self.with_dcn = False
        self.init_cfg = init_cfg
        self.conv = build_conv_layer(conv_cfg, in_channels, channels * radix, kernel_size,
                                     stride=stride, padding=padding, dilation=dilation,
                                     groups=groups * radix, bias=False)
        # numbered from 0, as the original implementation and mmdet's checkpoints
        self.norm0_name, norm0 = build_norm_layer(norm_cfg, channels * radix, postfix=0)
        self.add_module(self.norm0_name, norm0)
        self.relu = nn.ReLU(inplace=True)
        self.fc1 = build_conv_layer(None, channels, inter_channels, 1, groups=groups)
        self.norm1_name, norm1 = build_norm_layer(norm_cfg, inter_channels, postfix=1)
        self.add_module(self.norm1_name, norm1)
        self.fc2 = build_conv_layer(None, inter_channels, channels * radix, 1, groups=groups)
        self.rsoftmax = RSoftmax(radix, groups)

    @property
    def norm0(self):
        return getattr(self, self.norm0_name)

    @property
    def norm1(self):
        return getattr(self, self.norm1_name)

    def forward(self, x):
        x = self.relu(self.norm0(self.conv(x)))
        batch = x.size(0)
        if self.radix > 1:
            splits = x.view(batch, self.radix, -1, *x.shape[2:])
            gap = splits.sum(dim=1)
        else:
            gap = x
        gap = self.relu(self.norm1(self.fc1(F.adaptive_avg_pool2d(gap, 1))))
        atten = self.rsoftmax(self.fc2(gap)).view(batch, -1, 1, 1)
        if self.radix > 1:
            out = (atten.view(batch, self.radix, -1, 1, 1) * splits).sum(dim=1)
        else:
            out = atten * x
        return out.contiguous()


class Bottleneck(_Bottleneck):
    """ResNeSt's Bottleneck: ResNet's with ``conv2`` a :class:`SplitAttentionConv2d` of
    ``width`` channels (``planes``, or ``floor(planes * base_width / base_channels) * groups``
    when ``groups > 1``) and no ``norm2`` (the split attention has its own norms). With
    ``avg_down_stride`` a strided ``conv2`` runs at stride 1 and ``avd_layer`` (3x3 average
    pool) strides after it. Plugins after conv1 / conv2 see ``width`` channels (mmdet builds
    them for ``planes``, which fails when ``groups > 1``)."""

    expansion = 4

    def __init__(self, inplanes, planes, groups=1, base_width=4, base_channels=64, radix=2,
                 reduction_factor=4, avg_down_stride=True, dcn=None, **kwargs):
        _refuse_dcn('ResNeSt Bottleneck', dcn)
        super().__init__(inplanes, planes, **kwargs)
        norm_cfg = kwargs.get('norm_cfg', dict(type='BN'))
        conv_cfg = self.conv_cfg
        width = planes if groups == 1 else \
            math.floor(planes * (base_width / base_channels)) * groups
        conv2_stride = self.conv2.stride[0]
        self.avg_down_stride = bool(avg_down_stride) and conv2_stride > 1
        # replaced in place: the attribute names and the state-dict order are mmdet's
        self.conv1 = build_conv_layer(conv_cfg, inplanes, width, 1, stride=self.conv1.stride,
                                      bias=False)
        self.add_module(self.norm1_name, build_norm_layer(norm_cfg, width, postfix=1)[1])
        self.with_modulated_dcn = False
        self.conv2 = SplitAttentionConv2d(
            width, width, 3, stride=1 if self.avg_down_stride else conv2_stride,
            padding=self.dilation, dilation=self.dilation, groups=groups, radix=radix,
            reduction_factor=reduction_factor, conv_cfg=conv_cfg, norm_cfg=norm_cfg)
        delattr(self, self.norm2_name)
        if self.avg_down_stride:
            self.avd_layer = nn.AvgPool2d(3, conv2_stride, padding=1)
        self.conv3 = build_conv_layer(conv_cfg, width, planes * self.expansion, 1, bias=False)
        self.add_module(self.norm3_name,
                        build_norm_layer(norm_cfg, planes * self.expansion, postfix=3)[1])
        self.remove_all_block_plugins()
        self.make_all_block_plugins(width, width)

    def _inner_forward(self, x):
        identity = x
        out = self.relu(self.norm1(self.conv1(x)))
        out = self.forward_plugin(out, 'after_conv1')
        out = self.conv2(out)
        if self.avg_down_stride:
            out = self.avd_layer(out)
        out = self.forward_plugin(out, 'after_conv2')
        out = self.norm3(self.conv3(out))
        out = self.forward_plugin(out, 'after_conv3')
        if self.downsample is not None:
            identity = self.downsample(x)
        return out + identity


@MODELS.register_module()
class ResNeSt(ResNetV1d):
    """ResNeSt backbone, mmdet 2.x arguments: a :class:`ResNetV1d` (so ``deep_stem`` and
    ``avg_down`` are not arguments) of ResNeSt Bottlenecks.

    Args:
        groups (int): cardinality of each split-attention conv. Default 1.
        base_width (int): channels per group at the first stage's width (``groups > 1``).
        radix (int): splits per group (1: a sigmoid attention). Default 2.
        reduction_factor (int): the attention's hidden width is
            ``max(width * radix // reduction_factor, 32)``. Default 4.
        avg_down_stride (bool): stride by a 3x3 average pool after conv2. Default True.
        **kwargs: :class:`ResNet`'s (``depth`` 50, 101, 152 or 200; ``stem_channels``).
    """

    arch_settings = {
        50: (Bottleneck, (3, 4, 6, 3)),
        101: (Bottleneck, (3, 4, 23, 3)),
        152: (Bottleneck, (3, 8, 36, 3)),
        200: (Bottleneck, (3, 24, 36, 3)),
    }

    def __init__(self, groups=1, base_width=4, radix=2, reduction_factor=4,
                 avg_down_stride=True, **kwargs):
        _refuse_dcn('ResNeSt', kwargs.get('dcn'), kwargs.get('stage_with_dcn', ()))
        for name, value in (('groups', groups), ('base_width', base_width), ('radix', radix),
                            ('reduction_factor', reduction_factor)):
            _check_positive_int('ResNeSt', name, value)
        self.groups = groups
        self.base_width = base_width
        self.radix = radix
        self.reduction_factor = reduction_factor
        self.avg_down_stride = avg_down_stride
        super().__init__(**kwargs)

    def make_res_layer(self, **kwargs):
        return ResLayer(groups=self.groups, base_width=self.base_width,
                        base_channels=self.base_channels, radix=self.radix,
                        reduction_factor=self.reduction_factor,
                        avg_down_stride=self.avg_down_stride, **kwargs)
