"""RegNet (mmdet 2.x's ``RegNet``: arguments, defaults, stage widths and state-dict keys) with
exact activation checkpointing.

A RegNetX is a ResNeXt whose stages come from a quantised linear width rule (``arch``: ``w0``,
``wa``, ``wm``, ``depth``, ``group_w``, ``bot_mul``; or one of mmdet's names ``regnetx_400mf``
... ``regnetx_12gf``), built as mmdet builds it: :meth:`RegNet.generate_regnet` gives each block's
width, :meth:`RegNet.get_stages_from_blocks` groups equal widths into stages,
:meth:`RegNet.adjust_width_group` makes every width a multiple of its group width. The blocks are
ResNeXt's Bottleneck without expansion (``groups = width // group_w``, base width ``group_w``,
base channels the stage width); the stem is a 3x3 stride-2 conv, norm and ReLU, without max pool.
Keys are mmdet's: ``conv1.weight bn1.* layer1.0.conv1.weight ... layer1.0.downsample.0.weight``,
so ``open-mmlab://regnetx_3.2gf`` loads strictly.

Checkpoint units, as :class:`ResNet`'s: ``stem`` (conv1 / bn1 / ReLU) and every block
``layer{i}.{j}``; ``with_cp`` (a bool or one per stage) sets them to ``'full'``, and
``set_checkpoint_plan`` / ``set_checkpoint_segments`` change them later.

``dcn`` / ``stage_with_dcn`` make the grouped 3x3 conv2 of the marked stages deformable, as
:class:`ResNet` (mmdet's ``mask_rcnn_regnetx-3.2GF_fpn_mdconv_c3-c5``).

As in mmdet, ``deep_stem`` and ``base_channels`` are kept as attributes and change nothing (the
stem is always the 3x3 conv, ``stem_channels`` wide).
"""

import numpy as np

import torch.nn as nn

from ...registry import MODELS
from ..checkpointing import CheckpointUnit
from ..utils import build_norm_layer
from ..utils.pretrained import pretrained_to_init_cfg
from .base import BaseBackbone
from ..utils import ResLayer
from .resnet import ResNet
from .resnext import Bottleneck as _ResNeXtBottleneck

__all__ = ['RegNet']

_ARCH_KEYS = ('w0', 'wa', 'wm', 'group_w', 'depth', 'bot_mul')


class Bottleneck(_ResNeXtBottleneck):
    """ResNeXt's Bottleneck with no expansion (mmdet sets ``expansion = 1`` while it builds a
    RegNet): the block's output is ``planes`` wide."""

    expansion = 1


@MODELS.register_module()
class RegNet(ResNet):
    """RegNet backbone, mmdet 2.x arguments.

    Args:
        arch (str | dict): one of :attr:`arch_settings` or a dict of ``w0`` (initial width,
            a multiple of 8), ``wa`` (width slope), ``wm`` (width multiplier, > 1), ``group_w``,
            ``depth`` (blocks in all) and ``bot_mul`` (bottleneck ratio).
        stem_channels (int): width of the stem conv (32).
        base_channels (int): kept for mmdet's signature; unused, as there.
        strides, dilations (Sequence[int]): one per stage (``(2, 2, 2, 2)``, ``(1, 1, 1, 1)``).
        with_cp (bool | tuple[bool]): ``'full'`` checkpointing of the stem and blocks, as
            :class:`ResNet` (the stem follows the first stage's flag).
        cp_use_reentrant (bool): torch's reentrant checkpoint instead of the non-reentrant one.
        Others as :class:`ResNet` (``out_indices``, ``style``, ``avg_down``, ``frozen_stages``,
        ``norm_cfg``, ``norm_eval``, ``zero_init_residual``, ``pretrained`` / ``init_cfg``).
    """

    arch_settings = {
        'regnetx_400mf': dict(w0=24, wa=24.48, wm=2.54, group_w=16, depth=22, bot_mul=1.0),
        'regnetx_800mf': dict(w0=56, wa=35.73, wm=2.28, group_w=16, depth=16, bot_mul=1.0),
        'regnetx_1.6gf': dict(w0=80, wa=34.01, wm=2.25, group_w=24, depth=18, bot_mul=1.0),
        'regnetx_3.2gf': dict(w0=88, wa=26.31, wm=2.25, group_w=48, depth=25, bot_mul=1.0),
        'regnetx_4.0gf': dict(w0=96, wa=38.65, wm=2.43, group_w=40, depth=23, bot_mul=1.0),
        'regnetx_6.4gf': dict(w0=184, wa=60.83, wm=2.07, group_w=56, depth=17, bot_mul=1.0),
        'regnetx_8.0gf': dict(w0=80, wa=49.56, wm=2.88, group_w=120, depth=23, bot_mul=1.0),
        'regnetx_12gf': dict(w0=168, wa=73.36, wm=2.37, group_w=112, depth=19, bot_mul=1.0),
    }

    def __init__(self, arch, in_channels=3, stem_channels=32, base_channels=32,
                 strides=(2, 2, 2, 2), dilations=(1, 1, 1, 1), out_indices=(0, 1, 2, 3),
                 style='pytorch', deep_stem=False, avg_down=False, frozen_stages=-1,
                 conv_cfg=None, norm_cfg=dict(type='BN', requires_grad=True), norm_eval=True,
                 dcn=None, stage_with_dcn=(False, False, False, False), plugins=None,
                 with_cp=False, cp_use_reentrant=False, zero_init_residual=True,
                 pretrained=None, init_cfg=None):
        BaseBackbone.__init__(self)
        arch = self._check_arch(arch)
        widths, num_stages = self.generate_regnet(arch['w0'], arch['wa'], arch['wm'],
                                                  arch['depth'])
        stage_widths, stage_blocks = self.get_stages_from_blocks(widths)
        group_widths = [arch['group_w']] * num_stages
        self.bottleneck_ratio = [arch['bot_mul']] * num_stages
        stage_widths, group_widths = self.adjust_width_group(
            stage_widths, self.bottleneck_ratio, group_widths)
        if not 1 <= num_stages <= 4:
            raise ValueError(f'RegNet arch {arch!r} gives {num_stages} stages; 1 to 4 are '
                             'allowed')
        if len(strides) != num_stages or len(dilations) != num_stages:
            raise ValueError(f'strides and dilations need {num_stages} entries (the stages of '
                             f'the arch), got strides={strides!r}, dilations={dilations!r}')
        out_indices = self._check_out_indices(out_indices, num_stages)
        if style not in ('pytorch', 'caffe'):
            raise ValueError(f"style must be 'pytorch' or 'caffe', got {style!r}")
        self._check_frozen_stages(frozen_stages, num_stages)
        for name, value in (('conv_cfg', conv_cfg), ('plugins', plugins)):
            if value is not None:
                raise NotImplementedError(f'RegNet {name} is not supported, got {value!r}')
        self._check_dcn(dcn, stage_with_dcn, num_stages, conv_cfg, Bottleneck)
        self.dcn = dcn
        self.stage_with_dcn = stage_with_dcn
        flags = self._stage_flags(with_cp, num_stages)
        self.init_cfg = pretrained_to_init_cfg(pretrained, init_cfg)
        self.stage_widths = stage_widths
        self.group_widths = group_widths
        self.depth = sum(stage_blocks)
        self.stem_channels = stem_channels
        self.base_channels = base_channels
        self.num_stages = num_stages
        self.strides = strides
        self.dilations = dilations
        self.out_indices = out_indices
        self.style = style
        self.deep_stem = deep_stem
        self.avg_down = avg_down
        self.frozen_stages = frozen_stages
        self.norm_cfg = norm_cfg
        self.norm_eval = norm_eval
        self.zero_init_residual = zero_init_residual
        self.cp_use_reentrant = cp_use_reentrant
        self.block = Bottleneck
        self.stage_blocks = stage_blocks[:num_stages]

        self._make_stem_layer(in_channels, stem_channels)
        self.stem_unit = CheckpointUnit.from_flag(flags[0], cp_use_reentrant)
        self.inplanes = stem_channels
        self.res_layers = []
        for i, num_blocks in enumerate(self.stage_blocks):
            group_width = self.group_widths[i]
            width = int(round(self.stage_widths[i] * self.bottleneck_ratio[i]))
            extra = dict(dcn=dcn) if dcn is not None and stage_with_dcn[i] else {}
            layer = self.make_res_layer(**extra,
                block=self.block, inplanes=self.inplanes, planes=self.stage_widths[i],
                num_blocks=num_blocks, stride=strides[i], dilation=dilations[i],
                avg_down=avg_down, norm_cfg=norm_cfg, style=style, with_cp=flags[i],
                cp_use_reentrant=cp_use_reentrant, groups=width // group_width,
                base_width=group_width, base_channels=self.stage_widths[i])
            self.inplanes = self.stage_widths[i]
            name = f'layer{i + 1}'
            self.add_module(name, layer)
            self.res_layers.append(name)
        self.feat_dim = stage_widths[-1]
        self._init_default_weights()
        self._freeze_stages()

    def _check_arch(self, arch):
        if isinstance(arch, str):
            if arch not in self.arch_settings:
                raise ValueError(f'RegNet arch {arch!r} is not one of the arch_settings: '
                                 f'{", ".join(self.arch_settings)}')
            return self.arch_settings[arch]
        if not isinstance(arch, dict):
            raise ValueError(f'Expect "arch" to be either a string or a dict, got {type(arch)}')
        missing = [k for k in _ARCH_KEYS if k not in arch]
        if missing:
            raise ValueError(f'RegNet arch {arch!r} lacks {", ".join(missing)}')
        return arch

    def make_res_layer(self, **kwargs):
        return ResLayer(**kwargs)

    def _make_stem_layer(self, in_channels, stem_channels):
        self.conv1 = nn.Conv2d(in_channels, stem_channels, 3, stride=2, padding=1, bias=False)
        self.norm1_name, norm1 = build_norm_layer(self.norm_cfg, stem_channels, postfix=1)
        self.add_module(self.norm1_name, norm1)
        self.relu = nn.ReLU(inplace=True)

    def _stem_modules(self):
        return [self.conv1, self.norm1, self.relu]

    def _stem_forward(self, x):
        return self.relu(self.norm1(self.conv1(x)))

    def generate_regnet(self, initial_width, width_slope, width_parameter, depth, divisor=8):
        """Each block's width: the linear ``initial_width + i * width_slope`` snapped to the
        nearest power of ``width_parameter`` times ``initial_width``, rounded to ``divisor``.
        Returns (widths, number of distinct widths = stages)."""
        if not (width_slope >= 0 and initial_width > 0 and width_parameter > 1
                and initial_width % divisor == 0):
            raise ValueError(
                f'RegNet arch needs wa >= 0, w0 > 0 a multiple of {divisor} and wm > 1, got '
                f'w0={initial_width!r}, wa={width_slope!r}, wm={width_parameter!r}')
        linear = np.arange(depth) * width_slope + initial_width
        exponents = np.round(np.log(linear / initial_width) / np.log(width_parameter))
        snapped = initial_width * np.power(width_parameter, exponents)
        widths = np.round(np.divide(snapped, divisor)) * divisor
        return widths.astype(int).tolist(), len(np.unique(widths))

    @staticmethod
    def quantize_float(number, divisor):
        """The multiple of ``divisor`` nearest to ``number`` (ties to even), as an int."""
        return int(round(number / divisor) * divisor)

    def adjust_width_group(self, widths, bottleneck_ratio, groups):
        """Group widths capped at the bottleneck widths, and bottleneck widths rounded to a
        multiple of their group width; returns (stage widths, group widths)."""
        inner = [int(w * b) for w, b in zip(widths, bottleneck_ratio)]
        groups = [min(g, w) for g, w in zip(groups, inner)]
        inner = [self.quantize_float(w, g) for w, g in zip(inner, groups)]
        return [int(w / b) for w, b in zip(inner, bottleneck_ratio)], groups

    def get_stages_from_blocks(self, widths):
        """Runs of equal block widths as stages: (stage widths, blocks per stage)."""
        starts = [i for i, w in enumerate(widths) if i == 0 or w != widths[i - 1]]
        stage_widths = [widths[i] for i in starts]
        stage_blocks = [b - a for a, b in zip(starts, starts[1:] + [len(widths)])]
        return stage_widths, stage_blocks
