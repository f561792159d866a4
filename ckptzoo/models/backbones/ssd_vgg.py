"""SSD's VGG (mmdet 2.x's ``SSDVGG``, on mmcv's ``VGG``): the VGG conv stages in one
``features`` Sequential (keys ``features.{i}.weight``), then pool5 (3x3, stride 1), the dilated
fc6 conv (1024, dilation 6) and fc7 (1x1), as mmdet 2.28.2 builds it. The extra layers and the
L2 norm live in :class:`~ckptzoo.models.necks.SSDNeck` since mmdet 2.18; ``input_size`` and
``l2_norm_scale`` are accepted and only warn, as there.

Checkpoint units (not an mmdet 2.x feature): ``features.{i}``, each starting at a conv (its
ReLU and a following pool join it) or right after an output of ``out_feature_indices``; the
unit's name is the index of its first layer. ``with_cp`` sets them all to ``'full'``.
"""
import warnings

import torch.nn as nn

from ...registry import MODELS
from ..utils import apply_init_cfg
from ..utils.pretrained import load_pretrained
from .chain import ChainBackbone

__all__ = ['SSDVGG', 'make_vgg_layer']


def make_vgg_layer(inplanes, planes, num_blocks, dilation=1, with_bn=False, ceil_mode=False):
    """mmcv's VGG stage: ``num_blocks`` x (3x3 conv, [BN], ReLU), then a 2x2 max pool."""
    layers = []
    for _ in range(num_blocks):
        layers.append(nn.Conv2d(inplanes, planes, 3, padding=dilation, dilation=dilation))
        if with_bn:
            layers.append(nn.BatchNorm2d(planes))
        layers.append(nn.ReLU(inplace=True))
        inplanes = planes
    layers.append(nn.MaxPool2d(kernel_size=2, stride=2, ceil_mode=ceil_mode))
    return layers


@MODELS.register_module()
class SSDVGG(ChainBackbone):
    """VGG backbone for SSD, mmdet 2.x arguments.

    Args:
        depth (int): 11, 13, 16 or 19.
        with_last_pool (bool): keep the 5th stage's pool (False for SSD).
        ceil_mode (bool): the stage pools round up (True for SSD).
        out_indices (Sequence[int]): kept as mmcv's VGG has it; unused by SSDVGG's forward.
        out_feature_indices (Sequence[int]): indices into ``features`` whose outputs are
            returned ((22, 34): conv4_3's ReLU and fc7's); a single output is returned bare,
            as mmdet does.
        pretrained / init_cfg: as mmdet (default Kaiming convs).
        input_size, l2_norm_scale: deprecated, warn and change nothing (see SSDNeck).
        with_cp (bool), cp_use_reentrant (bool): checkpointing (not in mmdet 2.x).
    """

    arch_settings = {11: (1, 1, 2, 2, 2), 13: (2, 2, 2, 2, 2), 16: (2, 2, 3, 3, 3),
                     19: (2, 2, 4, 4, 4)}

    def __init__(self, depth, with_last_pool=False, ceil_mode=True, out_indices=(3, 4),
                 out_feature_indices=(22, 34), pretrained=None, init_cfg=None,
                 input_size=None, l2_norm_scale=None, with_cp=False, cp_use_reentrant=False):
        super().__init__()
        if depth not in self.arch_settings:
            raise ValueError(f'invalid depth {depth!r} for vgg: allowed are '
                             f'{", ".join(map(str, self.arch_settings))}')
        if not isinstance(with_cp, bool):
            raise ValueError(f'SSDVGG with_cp must be a bool, got {with_cp!r}')
        if init_cfg is not None and pretrained is not None:
            raise ValueError('init_cfg and pretrained cannot be specified at the same time')
        self.stage_blocks = self.arch_settings[depth]
        self.out_indices = out_indices
        layers, inplanes, self.range_sub_modules, start = [], 3, [], 0
        for i, num_blocks in enumerate(self.stage_blocks):
            planes = 64 * 2**i if i < 4 else 512
            stage = make_vgg_layer(inplanes, planes, num_blocks, ceil_mode=ceil_mode)
            layers += stage
            self.range_sub_modules.append([start, start + len(stage)])
            start += len(stage)
            inplanes = planes
        if not with_last_pool:
            layers.pop(-1)
            self.range_sub_modules[-1][1] -= 1
        layers += [nn.MaxPool2d(kernel_size=3, stride=1, padding=1),
                   nn.Conv2d(512, 1024, kernel_size=3, padding=6, dilation=6),
                   nn.ReLU(inplace=True), nn.Conv2d(1024, 1024, kernel_size=1),
                   nn.ReLU(inplace=True)]
        self.module_name = 'features'
        self.features = nn.Sequential(*layers)
        if not (out_feature_indices and all(
                isinstance(i, int) and 0 <= i < len(layers) for i in out_feature_indices)):
            raise ValueError(f'out_feature_indices must be indices into features '
                             f'(0..{len(layers) - 1}), got {out_feature_indices!r}')
        self.out_feature_indices = out_feature_indices
        if init_cfg is not None:
            self.init_cfg = init_cfg
        elif isinstance(pretrained, str):
            warnings.warn('pretrained is deprecated, use init_cfg', DeprecationWarning)
            self.init_cfg = dict(type='Pretrained', checkpoint=pretrained)
        elif pretrained is None:
            self.init_cfg = [dict(type='Kaiming', layer='Conv2d'),
                             dict(type='Constant', val=1, layer='BatchNorm2d'),
                             dict(type='Normal', std=0.01, layer='Linear')]
        else:
            raise TypeError(f'pretrained must be a str or None, got {pretrained!r}')
        if input_size is not None:
            warnings.warn('DeprecationWarning: input_size is deprecated')
        if l2_norm_scale is not None:
            warnings.warn('DeprecationWarning: l2_norm_scale in VGG is deprecated, it has been '
                          'moved to SSDNeck.')
        self._make_units(with_cp, cp_use_reentrant)
        apply_init_cfg(self, self.init_cfg)

    def _links(self):
        outs = set(self.out_feature_indices)
        starts = [i for i, m in enumerate(self.features)
                  if i == 0 or isinstance(m, nn.Conv2d) or i - 1 in outs]
        ends = starts[1:] + [len(self.features)]
        return [(f'features.{a}', list(self.features[a:b]), b - 1 in outs)
                for a, b in zip(starts, ends)]

    def forward(self, x):
        outs = super().forward(x)
        return outs[0] if len(outs) == 1 else outs

    def init_weights(self):
        load_pretrained(self, self.init_cfg if isinstance(self.init_cfg, dict) else None,
                        type(self).__name__)
