"""CSPDarknet (mmdet 2.x's, YOLOv5 / YOLOX): arch ``P5`` / ``P6``, ``deepen_factor`` /
``widen_factor``, :class:`Focus` stem, :class:`SPPBottleneck` in the last stage, CSP layers;
arguments, defaults and keys ``stem.* stage{i}.{0,1,2}.*`` as mmdet's.

Checkpoint units (not an mmdet 2.x feature): ``stem`` and each module of a stage,
``stage{i}.{j}`` (the stride-2 conv, the SPP, the CSP layer); ``with_cp`` sets them all to
``'full'``.
"""
import math

import torch
import torch.nn as nn

from ...registry import MODELS
from ..utils import ConvModule, CSPLayer, DepthwiseSeparableConvModule, apply_init_cfg
from ..utils.pretrained import load_pretrained
from .chain import ChainBackbone

__all__ = ['CSPDarknet', 'Focus', 'SPPBottleneck']

_NORM = dict(type='BN', momentum=0.03, eps=0.001)


class Focus(nn.Module):
    """Space to depth (the four pixel phases stacked on channels, in mmdet's order: top-left,
    bottom-left, top-right, bottom-right), then a ConvModule (key ``conv.*``)."""

    def __init__(self, in_channels, out_channels, kernel_size=1, stride=1, conv_cfg=None,
                 norm_cfg=_NORM, act_cfg=dict(type='Swish')):
        super().__init__()
        self.conv = ConvModule(in_channels * 4, out_channels, kernel_size, stride,
                               padding=(kernel_size - 1) // 2, conv_cfg=conv_cfg,
                               norm_cfg=norm_cfg, act_cfg=act_cfg)

    def forward(self, x):
        x = torch.cat((x[..., ::2, ::2], x[..., 1::2, ::2], x[..., ::2, 1::2],
                       x[..., 1::2, 1::2]), dim=1)
        return self.conv(x)


class SPPBottleneck(nn.Module):
    """Spatial pyramid pooling (YOLOv3-SPP): 1x1 conv to half width, max pools of
    ``kernel_sizes`` (stride 1, same size) concatenated with it, 1x1 conv."""

    def __init__(self, in_channels, out_channels, kernel_sizes=(5, 9, 13), conv_cfg=None,
                 norm_cfg=_NORM, act_cfg=dict(type='Swish'), init_cfg=None):
        super().__init__()
        mid = in_channels // 2
        cfg = dict(conv_cfg=conv_cfg, norm_cfg=norm_cfg, act_cfg=act_cfg)
        self.conv1 = ConvModule(in_channels, mid, 1, stride=1, **cfg)
        self.poolings = nn.ModuleList([nn.MaxPool2d(ks, stride=1, padding=ks // 2)
                                       for ks in kernel_sizes])
        self.conv2 = ConvModule(mid * (len(kernel_sizes) + 1), out_channels, 1, **cfg)

    def forward(self, x):
        x = self.conv1(x)
        return self.conv2(torch.cat([x] + [pool(x) for pool in self.poolings], dim=1))


@MODELS.register_module()
class CSPDarknet(ChainBackbone):
    """CSP-Darknet backbone, mmdet 2.x arguments.

    Args:
        arch (str): ``'P5'`` or ``'P6'``; ``arch_ovewrite`` (mmdet's spelling) replaces it.
        deepen_factor, widen_factor (float): depth and width multipliers.
        out_indices (Sequence[int]): outputs among the stem (0) and the stages (1..).
        frozen_stages (int): -1 none; k freezes the stem and stages 1..k.
        use_depthwise (bool): depthwise separable 3x3 convs.
        spp_kernal_sizes (tuple[int]): mmdet's spelling too.
        conv_cfg, norm_cfg (BN, momentum 0.03, eps 1e-3), act_cfg (Swish), norm_eval,
        init_cfg (Kaiming uniform, a=sqrt(5), fan_in): as mmdet.
        with_cp (bool): ``'full'`` checkpointing of every unit (not in mmdet 2.x).
        cp_use_reentrant (bool): torch's reentrant checkpoint.
    """

    # in, out, blocks, add_identity, use_spp
    arch_settings = {
        'P5': [[64, 128, 3, True, False], [128, 256, 9, True, False],
               [256, 512, 9, True, False], [512, 1024, 3, False, True]],
        'P6': [[64, 128, 3, True, False], [128, 256, 9, True, False],
               [256, 512, 9, True, False], [512, 768, 3, True, False],
               [768, 1024, 3, False, True]],
    }

    def __init__(self, arch='P5', deepen_factor=1.0, widen_factor=1.0, out_indices=(2, 3, 4),
                 frozen_stages=-1, use_depthwise=False, arch_ovewrite=None,
                 spp_kernal_sizes=(5, 9, 13), conv_cfg=None, norm_cfg=_NORM,
                 act_cfg=dict(type='Swish'), norm_eval=False,
                 init_cfg=dict(type='Kaiming', layer='Conv2d', a=math.sqrt(5),
                               distribution='uniform', mode='fan_in',
                               nonlinearity='leaky_relu'),
                 with_cp=False, cp_use_reentrant=False):
        super().__init__()
        if arch not in self.arch_settings:
            raise ValueError(f'CSPDarknet arch must be one of {", ".join(self.arch_settings)}, '
                             f'got {arch!r}')
        if not isinstance(with_cp, bool):
            raise ValueError(f'CSPDarknet with_cp must be a bool, got {with_cp!r}')
        arch_setting = arch_ovewrite or self.arch_settings[arch]
        num = len(arch_setting)
        self.out_indices = self._check_out_indices(out_indices, num + 1,
                                                   units='outputs: stem and stages')
        self._check_frozen_stages(frozen_stages, num)
        self.frozen_stages = frozen_stages
        self.use_depthwise = use_depthwise
        self.norm_eval = norm_eval
        self.init_cfg = init_cfg
        conv = DepthwiseSeparableConvModule if use_depthwise else ConvModule
        cfg = dict(conv_cfg=conv_cfg, norm_cfg=norm_cfg, act_cfg=act_cfg)
        self.stem = Focus(3, int(arch_setting[0][0] * widen_factor), kernel_size=3, **cfg)
        self.layers = ['stem']
        for i, (in_c, out_c, num_blocks, add_identity, use_spp) in enumerate(arch_setting):
            in_c, out_c = int(in_c * widen_factor), int(out_c * widen_factor)
            num_blocks = max(round(num_blocks * deepen_factor), 1)
            stage = [conv(in_c, out_c, 3, stride=2, padding=1, **cfg)]
            if use_spp:
                stage.append(SPPBottleneck(out_c, out_c, kernel_sizes=spp_kernal_sizes, **cfg))
            stage.append(CSPLayer(out_c, out_c, num_blocks=num_blocks,
                                  add_identity=add_identity, use_depthwise=use_depthwise,
                                  **cfg))
            self.add_module(f'stage{i + 1}', nn.Sequential(*stage))
            self.layers.append(f'stage{i + 1}')
        self._make_units(with_cp, cp_use_reentrant)
        apply_init_cfg(self, init_cfg)
        self._freeze_stages()

    def _links(self):
        links = [('stem', [self.stem], 0 in self.out_indices)]
        for i, name in enumerate(self.layers[1:], 1):
            stage = getattr(self, name)
            for j, m in enumerate(stage):
                links.append((f'{name}.{j}', [m], i in self.out_indices and j == len(stage) - 1))
        return links

    def _frozen_modules(self):
        return [getattr(self, n) for n in self.layers[:self.frozen_stages + 1]] \
            if self.frozen_stages >= 0 else []

    def init_weights(self):
        load_pretrained(self, self.init_cfg if isinstance(self.init_cfg, dict)
                        and self.init_cfg.get('type') == 'Pretrained' else None,
                        type(self).__name__)
