"""mmcv 1.x ``NonLocal2d`` (Wang et al. 2018): every position attends to every other one.

Keys are mmcv's: ``g.conv``, ``conv_out.conv`` (and ``conv_out.bn`` with a norm), ``theta.conv``,
``phi.conv`` (``g.0.conv`` / ``phi.0.conv`` with ``sub_sample``), so mmdet checkpoints load.
"""
import torch
import torch.nn as nn

from .conv_module import ConvModule
from .weight_init import constant_init, normal_init

__all__ = ['NonLocal2d']

_MODES = ('gaussian', 'embedded_gaussian', 'dot_product', 'concatenation')


class NonLocal2d(nn.Module):
    """Args (mmcv's): ``in_channels``; ``reduction`` (inner channels ``in_channels //
    reduction``, at least 1); ``use_scale`` (divide the embedded-gaussian energies by
    ``sqrt(inner channels)``); ``conv_cfg`` (``nn.Conv2d`` only); ``norm_cfg`` (of
    ``conv_out`` only); ``mode``: one of 'gaussian', 'embedded_gaussian', 'dot_product',
    'concatenation'; ``sub_sample``: 2x2 max-pool on the key / value path; ``std``,
    ``zeros_init``: the initialisation (``conv_out`` zero: the block starts as identity)."""

    def __init__(self, in_channels, reduction=2, use_scale=True, conv_cfg=dict(type='Conv2d'),
                 norm_cfg=None, mode='embedded_gaussian', sub_sample=False, **init_kwargs):
        super().__init__()
        if mode not in _MODES:
            raise ValueError(f'NonLocal2d mode must be one of {", ".join(_MODES)}, got '
                             f'{mode!r}')
        unknown = set(init_kwargs) - {'std', 'zeros_init'}
        if unknown:
            raise TypeError(f'NonLocal2d got unexpected arguments {sorted(unknown)}')
        self.in_channels = in_channels
        self.reduction = reduction
        self.use_scale = use_scale
        self.inter_channels = max(in_channels // reduction, 1)
        self.mode = mode
        self.sub_sample = sub_sample

        def conv1x1(cin, cout, **kw):
            return ConvModule(cin, cout, 1, conv_cfg=conv_cfg, act_cfg=None, **kw)

        self.g = conv1x1(in_channels, self.inter_channels)
        self.conv_out = conv1x1(self.inter_channels, in_channels, norm_cfg=norm_cfg)
        if mode != 'gaussian':
            self.theta = conv1x1(in_channels, self.inter_channels)
            self.phi = conv1x1(in_channels, self.inter_channels)
        if mode == 'concatenation':
            self.concat_project = ConvModule(self.inter_channels * 2, 1, 1, bias=False,
                                             act_cfg=dict(type='ReLU'))
        self._init_kwargs = init_kwargs
        self.init_weights(**init_kwargs)
        if sub_sample:
            pool = nn.MaxPool2d(kernel_size=(2, 2))
            self.g = nn.Sequential(self.g, pool)
            self.phi = nn.Sequential(self.phi, pool) if mode != 'gaussian' else pool

    def init_weights(self, std=0.01, zeros_init=True):
        """mmcv's: normal ``std`` on g / theta / phi, ``conv_out`` (its norm when it has one)
        zero, or normal with ``zeros_init=False``."""
        for name in (('g', ) if self.mode == 'gaussian' else ('g', 'theta', 'phi')):
            m = getattr(self, name)
            m = m[0] if isinstance(m, nn.Sequential) else m
            normal_init(m.conv, std=std)
        target = self.conv_out.conv if self.conv_out.norm_cfg is None else self.conv_out.norm
        if zeros_init:
            constant_init(target, 0)
        else:
            normal_init(target, std=std)

    def _pairwise(self, theta_x, phi_x):
        if self.mode == 'concatenation':
            h, w = theta_x.size(2), phi_x.size(3)
            feat = torch.cat([theta_x.repeat(1, 1, 1, w), phi_x.repeat(1, 1, h, 1)], dim=1)
            weight = self.concat_project(feat)
            n, _, h, w = weight.size()
            return weight.view(n, h, w) / w
        weight = torch.matmul(theta_x, phi_x)
        if self.mode == 'dot_product':
            return weight / weight.shape[-1]
        if self.mode == 'embedded_gaussian' and self.use_scale:
            weight = weight / theta_x.shape[-1] ** 0.5
        return weight.softmax(dim=-1)

    def forward(self, x):
        n = x.size(0)
        g_x = self.g(x).view(n, self.inter_channels, -1).permute(0, 2, 1)
        if self.mode == 'gaussian':
            theta_x = x.view(n, self.in_channels, -1).permute(0, 2, 1)
            phi_x = (self.phi(x) if self.sub_sample else x).view(n, self.in_channels, -1)
        elif self.mode == 'concatenation':
            theta_x = self.theta(x).view(n, self.inter_channels, -1, 1)
            phi_x = self.phi(x).view(n, self.inter_channels, 1, -1)
        else:
            theta_x = self.theta(x).view(n, self.inter_channels, -1).permute(0, 2, 1)
            phi_x = self.phi(x).view(n, self.inter_channels, -1)
        y = torch.matmul(self._pairwise(theta_x, phi_x), g_x)
        y = y.permute(0, 2, 1).contiguous().reshape(n, self.inter_channels, *x.size()[2:])
        return x + self.conv_out(y)
