"""mmcv 1.x's deformable convolutions on ``torchvision.ops.deform_conv2d`` (no compiled mmcv):
``DeformConv2d`` / ``DeformConv2dPack`` (v1, Dai et al. 2017; mmcv's conv layer ``'DCN'``) and
``ModulatedDeformConv2d`` / ``ModulatedDeformConv2dPack`` (v2, Zhu et al. 2019; ``'DCNv2'``).

Same arguments, defaults, initialisation and state-dict keys as mmcv (v1: ``weight``; v2:
``weight`` and ``bias``; the packs add ``conv_offset.weight`` / ``conv_offset.bias``), and the
same offset layout: per deform group, ``y0, x0, y1, x1, ...`` for the kernel points in row-major
order, so ``B x deform_groups * 2 * kh * kw x H_out x W_out``; the v2 mask is ``B x
deform_groups * kh * kw x H_out x W_out``. ``groups`` splits the channels of the convolution
as ``nn.Conv2d``; ``deform_groups`` splits the input channels into blocks that share one
offset field (the two are independent, as in mmcv). Sampling outside the input reads zeros
(bilinear with zero padding), as mmcv's kernels. ``deformable_groups`` is mmcv's deprecated
alias of ``deform_groups`` (some mmdet configs use it). ``im2col_step`` (v1 only, as mmcv) is
accepted and changes nothing: torchvision needs no batch chunking, so mmcv's rule that the
batch be divisible by it is not imposed.
"""
import math
import warnings

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.modules.utils import _pair
from torchvision.ops import deform_conv2d

__all__ = ['DeformConv2d', 'DeformConv2dPack', 'ModulatedDeformConv2d',
           'ModulatedDeformConv2dPack', 'upgrade_offset_keys']


def _deform_groups(cls_name, deform_groups, deformable_groups):
    if deformable_groups is not None:  # mmcv's deprecated_api_warning renames it
        if deform_groups != 1:
            raise ValueError(f'{cls_name}: give deform_groups or its deprecated alias '
                             f'deformable_groups, not both')
        warnings.warn(f'{cls_name}: "deformable_groups" is deprecated, use "deform_groups"',
                      DeprecationWarning)
        deform_groups = deformable_groups
    return deform_groups


class _DeformBase(nn.Module):
    """The arguments and checks the two deformable convolutions share (mmcv's)."""

    def _setup(self, in_channels, out_channels, kernel_size, stride, padding, dilation, groups,
               deform_groups):
        for name, value in (('groups', groups), ('deform_groups', deform_groups)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f'{type(self).__name__} {name} must be a positive int, '
                                 f'got {value!r}')
        if in_channels % groups or out_channels % groups:
            raise ValueError(f'{type(self).__name__}: in_channels {in_channels} and '
                             f'out_channels {out_channels} must be divisible by groups {groups}')
        if in_channels % deform_groups:
            raise ValueError(f'{type(self).__name__}: in_channels {in_channels} must be '
                             f'divisible by deform_groups {deform_groups}')
        self.in_channels = in_channels
        self.out_channels = out_channels
        self.kernel_size = _pair(kernel_size)
        self.stride = _pair(stride)
        self.padding = _pair(padding)
        self.dilation = _pair(dilation)
        self.groups = groups
        self.deform_groups = deform_groups
        self.transposed = False  # nn.Conv2d's attributes, as mmcv keeps them
        self.output_padding = (0, )
        self.weight = nn.Parameter(torch.empty(out_channels, in_channels // groups,
                                               *self.kernel_size))

    def _check(self, name, tensor, per_point):
        kh, kw = self.kernel_size
        expected = self.deform_groups * per_point * kh * kw
        if tensor.dim() != 4 or tensor.size(1) != expected:
            raise ValueError(f'{type(self).__name__}: {name} must be B x {expected} '
                             f'(deform_groups * {per_point} * kh * kw) x H_out x W_out, got '
                             f'{tuple(tensor.shape)}')

    def _conv(self, x, offset, mask=None, bias=None):
        if x.dim() != 4:
            raise ValueError(f'{type(self).__name__} expects a 4D input, got {x.dim()}D')
        self._check('offset', offset, 2)
        if mask is not None:
            self._check('mask', mask, 1)
            mask = mask.to(x.dtype)
        return deform_conv2d(x, offset.to(x.dtype), self.weight.to(x.dtype),
                             None if bias is None else bias.to(x.dtype), stride=self.stride,
                             padding=self.padding, dilation=self.dilation, mask=mask)

    def extra_repr(self):
        return (f'{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, '
                f'stride={self.stride}, padding={self.padding}, dilation={self.dilation}, '
                f'groups={self.groups}, deform_groups={self.deform_groups}, '
                f'bias={getattr(self, "bias", None) is not None}')


def _rename_old_offset_keys(state_dict, prefix, version):
    if version is None or version < 2:
        for key in ('weight', 'bias'):
            new, old = f'{prefix}conv_offset.{key}', f'{prefix[:-1]}_offset.{key}'
            if new not in state_dict and old in state_dict:
                state_dict[new] = state_dict.pop(old)


class _OffsetKeys:
    """mmcv's ``_load_from_state_dict`` of the packs: a state dict of version < 2 (mmdet v1
    checkpoints) keeps the offset conv beside the layer, as ``<name>_offset.weight`` /
    ``.bias``; it is moved to ``<name>.conv_offset.*``. torch >= 2 hands each module only the
    keys under its own prefix, so this works for loaders that pass the whole dict (mmcv's);
    :func:`upgrade_offset_keys` does it for a whole model before ``load_state_dict``."""

    _version = 2

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing_keys,
                              unexpected_keys, error_msgs):
        _rename_old_offset_keys(state_dict, prefix, local_metadata.get('version', None))
        super()._load_from_state_dict(state_dict, prefix, local_metadata, strict,
                                      missing_keys, unexpected_keys, error_msgs)


def upgrade_offset_keys(model, state_dict):
    """``state_dict`` (a copy, ``_metadata`` kept) with mmcv's version-1 offset keys of
    ``model``'s deformable conv packs (``<name>_offset.*``) renamed ``<name>.conv_offset.*``,
    as mmcv's packs rename them while they load; unchanged when there are none."""
    metadata = getattr(state_dict, '_metadata', None)
    out = None
    for name, module in model.named_modules():
        if name and isinstance(module, _OffsetKeys) and any(
                f'{name}_offset.{k}' in state_dict for k in ('weight', 'bias')):
            if out is None:
                out = type(state_dict)(state_dict) if isinstance(state_dict, dict) else \
                    dict(state_dict)
            version = None if metadata is None else metadata.get(name, {}).get('version')
            _rename_old_offset_keys(out, name + '.', version)
    if out is None:
        return state_dict
    if metadata is not None:
        out._metadata = metadata
    return out


class DeformConv2d(_DeformBase):
    """Deformable convolution v1, mmcv's arguments; ``forward(x, offset)``. No bias (mmcv
    refuses one). Like mmcv, an input smaller than the kernel is zero-padded at its bottom /
    right and the output cropped back (the result is the unpadded one: outside reads zero)."""

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0,
                 dilation=1, groups=1, deform_groups=1, bias=False, im2col_step=32,
                 deformable_groups=None):
        super().__init__()
        if bias:
            raise ValueError(f'bias={bias} is not supported in DeformConv2d (as mmcv)')
        deform_groups = _deform_groups(type(self).__name__, deform_groups, deformable_groups)
        self._setup(in_channels, out_channels, kernel_size, stride, padding, dilation, groups,
                    deform_groups)
        self.im2col_step = im2col_step  # accepted as mmcv's; torchvision needs no such step
        self.reset_parameters()

    def reset_parameters(self):
        nn.init.kaiming_uniform_(self.weight, a=0, nonlinearity='relu')

    def forward(self, x, offset):
        kh, kw = self.kernel_size
        pad_h, pad_w = max(kh - x.size(2), 0), max(kw - x.size(3), 0)
        if pad_h or pad_w:  # mmcv pads an input smaller than the kernel
            x = F.pad(x, (0, pad_w, 0, pad_h))
            offset = F.pad(offset, (0, pad_w, 0, pad_h))
        out = self._conv(x, offset)
        if pad_h or pad_w:
            out = out[:, :, :out.size(2) - pad_h, :out.size(3) - pad_w].contiguous()
        return out


class DeformConv2dPack(_OffsetKeys, DeformConv2d):
    """mmcv's ``'DCN'``: a :class:`DeformConv2d` that predicts its offsets from its input
    with ``conv_offset`` (an ``nn.Conv2d`` of the layer's kernel, stride, padding and
    dilation, ``deform_groups * 2 * kh * kw`` outputs, zero-initialised so that a new layer
    starts as the plain convolution); a drop-in for ``nn.Conv2d``."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        kh, kw = self.kernel_size
        self.conv_offset = nn.Conv2d(self.in_channels, self.deform_groups * 2 * kh * kw,
                                     kernel_size=self.kernel_size, stride=self.stride,
                                     padding=self.padding, dilation=self.dilation, bias=True)
        self.init_offset()

    def init_offset(self):
        nn.init.zeros_(self.conv_offset.weight)
        nn.init.zeros_(self.conv_offset.bias)

    def forward(self, x):
        # mmcv's pack calls the op directly, without DeformConv2d's padding of a tiny input
        # (the same numbers: outside reads zero; the summation order follows mmcv's)
        return self._conv(x, self.conv_offset(x))


class ModulatedDeformConv2d(_DeformBase):
    """Modulated deformable convolution (v2), mmcv's arguments (``bias`` True by default; no
    ``im2col_step``, as mmcv); ``forward(x, offset, mask)``, ``mask`` the per-point weights."""

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0,
                 dilation=1, groups=1, deform_groups=1, bias=True, deformable_groups=None):
        super().__init__()
        deform_groups = _deform_groups(type(self).__name__, deform_groups, deformable_groups)
        self._setup(in_channels, out_channels, kernel_size, stride, padding, dilation, groups,
                    deform_groups)
        if bias:
            self.bias = nn.Parameter(torch.empty(out_channels))
        else:
            self.register_parameter('bias', None)
        self.init_weights()

    def init_weights(self):
        """mmcv's: uniform in +-1/sqrt(in_channels * kh * kw), zero bias."""
        stdv = 1. / math.sqrt(self.in_channels * self.kernel_size[0] * self.kernel_size[1])
        nn.init.uniform_(self.weight, -stdv, stdv)
        if self.bias is not None:
            nn.init.zeros_(self.bias)

    def forward(self, x, offset, mask):
        return self._conv(x, offset, mask, self.bias)


class ModulatedDeformConv2dPack(_OffsetKeys, ModulatedDeformConv2d):
    """mmcv's ``'DCNv2'``: ``conv_offset`` (``deform_groups * 3 * kh * kw`` outputs,
    zero-initialised) gives ``o1, o2, mask`` (its three channel thirds): the offset is
    ``cat(o1, o2)`` and the mask ``sigmoid(mask)`` (0.5 everywhere for a new layer), as mmcv."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        kh, kw = self.kernel_size
        self.conv_offset = nn.Conv2d(self.in_channels, self.deform_groups * 3 * kh * kw,
                                     kernel_size=self.kernel_size, stride=self.stride,
                                     padding=self.padding, dilation=self.dilation, bias=True)
        self.init_weights()

    def init_weights(self):
        super().init_weights()
        if hasattr(self, 'conv_offset'):
            nn.init.zeros_(self.conv_offset.weight)
            nn.init.zeros_(self.conv_offset.bias)

    def forward(self, x):
        o1, o2, mask = torch.chunk(self.conv_offset(x), 3, dim=1)
        return self._conv(x, torch.cat((o1, o2), dim=1), torch.sigmoid(mask), self.bias)
