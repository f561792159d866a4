"""ResNet (mmdet 2.x arguments, torchvision state-dict keys) with exact activation checkpointing.

Checkpoint units (:mod:`ckptzoo.models.checkpointing`): ``stem`` and every block,
``layer{i}.{j}``. A block's unit covers its ``_inner_forward`` (convs, norms, downsample, residual
add; the last ReLU stays outside, as in mmdet); the stem's covers conv1 / norm1 / ReLU / max
pool, which mmdet and timm leave out although its 112x112 activations are the largest of the
network. ``with_cp`` sets them to ``'full'`` (the stem with the first stage's flag); the
non-reentrant implementation also checkpoints the first trainable block behind a frozen stage
(mmdet skips it because its input does not require grad). The stem and all blocks are one chain:
a segment may span stages, and returns the stage outputs that ``out_indices`` takes.

``conv_cfg`` (e.g. ``dict(type='ConvWS')``) builds every conv, downsample and stem included, as
mmdet; ``plugins`` (``ContextBlock``, ``GeneralizedAttention``, ``NonLocal2d``) go into the
Bottlenecks at mmdet's positions and names, inside each block's checkpoint unit. ``dcn``
(``dict(type='DCN' | 'DCNv2', deform_groups=1, fallback_on_stride=False)``) makes the 3x3 conv2
of the Bottlenecks of the stages ``stage_with_dcn`` marks a deformable conv (keys
``layerN.M.conv2.weight``, ``conv2.conv_offset.weight`` / ``.bias``, and ``conv2.bias`` for DCNv2
when asked), inside the block's checkpoint unit.
"""

import torch.nn as nn
from torch.nn.modules.batchnorm import _BatchNorm

from ...registry import MODELS
from ..checkpointing import CheckpointUnit, chain_step, unit_step
from ..utils import ResLayer, build_conv_layer, build_norm_layer, build_plugin_layer
from ..utils.pretrained import load_pretrained, pretrained_to_init_cfg
from .base import BaseBackbone


def _conv3x3(in_planes, out_planes, stride=1, dilation=1, conv_cfg=None):
    return build_conv_layer(conv_cfg, in_planes, out_planes, 3, stride=stride, padding=dilation,
                            dilation=dilation, bias=False)


class BasicBlock(nn.Module):
    """mmdet's BasicBlock; ``with_cp`` / ``cp_use_reentrant`` set its checkpoint unit
    (``cp_unit``), which ``set_checkpoint_plan`` changes later."""

    expansion = 1

    def __init__(self, inplanes, planes, stride=1, dilation=1, downsample=None, style='pytorch',
                 with_cp=False, cp_use_reentrant=False, norm_cfg=dict(type='BN'), conv_cfg=None,
                 dcn=None, plugins=None):
        super().__init__()
        if dcn is not None:
            raise NotImplementedError(f'BasicBlock takes no dcn (as mmdet: ResNet-18/34 have no '
                                      f'deformable conv; use depth 50, 101 or 152), got {dcn!r}')
        if plugins is not None:
            raise NotImplementedError('BasicBlock takes no plugins (as mmdet)')
        self.norm1_name, norm1 = build_norm_layer(norm_cfg, planes, postfix=1)
        self.norm2_name, norm2 = build_norm_layer(norm_cfg, planes, postfix=2)
        self.conv1 = _conv3x3(inplanes, planes, stride, dilation, conv_cfg)
        self.add_module(self.norm1_name, norm1)
        self.conv2 = _conv3x3(planes, planes, conv_cfg=conv_cfg)
        self.add_module(self.norm2_name, norm2)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = downsample
        self.stride = stride
        self.dilation = dilation
        self.cp_unit = CheckpointUnit.from_flag(with_cp, cp_use_reentrant)

    @property
    def with_cp(self):
        return self.cp_unit.mode is not None

    @property
    def norm1(self):
        return getattr(self, self.norm1_name)

    @property
    def norm2(self):
        return getattr(self, self.norm2_name)

    @property
    def last_norm(self):
        return self.norm2

    def _inner_forward(self, x):
        identity = x
        out = self.relu(self.norm1(self.conv1(x)))
        out = self.norm2(self.conv2(out))
        if self.downsample is not None:
            identity = self.downsample(x)
        return out + identity

    def forward(self, x):
        return self.relu(self.cp_unit(self._inner_forward, x))


class Bottleneck(BasicBlock):
    """mmdet's Bottleneck. ``plugins`` (a list of ``dict(cfg=..., position=...)``,
    ``position`` one of :data:`PLUGIN_POSITIONS`) insert plugin layers after a conv, named
    as mmdet (``context_block``, ``gen_attention_block``, ``nonlocal_block``, plus the cfg's
    ``postfix``); they run inside the block's checkpoint unit.

    ``dcn`` (a conv layer config, e.g. ``dict(type='DCN', deform_groups=1)``) builds conv2
    with it, as mmdet; ``conv_cfg`` must then be None (mmdet's rule). Its
    ``fallback_on_stride=True`` keeps a plain conv2 where conv2 is strided. mmdet pops that key
    from the one dict all blocks share, so there only the first block built sees it, and that
    block falls back whatever its stride: the name's meaning is kept here, and every mmdet
    config sets it False, where both agree.
    """

    expansion = 4
    PLUGIN_POSITIONS = ('after_conv1', 'after_conv2', 'after_conv3')

    def __init__(self, inplanes, planes, stride=1, dilation=1, downsample=None, style='pytorch',
                 with_cp=False, cp_use_reentrant=False, norm_cfg=dict(type='BN'), conv_cfg=None,
                 dcn=None, plugins=None):
        nn.Module.__init__(self)
        if style not in ('pytorch', 'caffe'):
            raise ValueError(f"style must be 'pytorch' or 'caffe', got {style!r}")
        if dcn is not None and not (isinstance(dcn, dict) and 'type' in dcn):
            raise ValueError(f'dcn must be None or a conv layer config dict with a "type" '
                             f"(e.g. dict(type='DCN', deform_groups=1)), got {dcn!r}")
        if plugins is not None and not (isinstance(plugins, list) and all(
                isinstance(p, dict) and p.get('position') in self.PLUGIN_POSITIONS
                for p in plugins)):
            raise ValueError(f'plugins must be a list of dicts whose position is one of '
                             f'{", ".join(self.PLUGIN_POSITIONS)}, got {plugins!r}')
        self.conv_cfg = conv_cfg
        self.dcn = dcn
        self.with_dcn = dcn is not None
        self.plugins = plugins
        self.with_plugins = plugins is not None
        # pytorch style puts the stride on the 3x3 conv, caffe style on the first 1x1 conv
        conv1_stride, conv2_stride = (1, stride) if style == 'pytorch' else (stride, 1)
        self.conv1_stride, self.conv2_stride = conv1_stride, conv2_stride
        self.norm1_name, norm1 = build_norm_layer(norm_cfg, planes, postfix=1)
        self.norm2_name, norm2 = build_norm_layer(norm_cfg, planes, postfix=2)
        self.norm3_name, norm3 = build_norm_layer(norm_cfg, planes * self.expansion, postfix=3)
        self.conv1 = build_conv_layer(conv_cfg, inplanes, planes, 1, stride=conv1_stride,
                                      bias=False)
        self.add_module(self.norm1_name, norm1)
        self.conv2 = self._make_conv2(planes, conv2_stride, dilation)
        self.add_module(self.norm2_name, norm2)
        self.conv3 = build_conv_layer(conv_cfg, planes, planes * self.expansion, 1, bias=False)
        self.add_module(self.norm3_name, norm3)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = downsample
        self.stride = stride
        self.dilation = dilation
        self.cp_unit = CheckpointUnit.from_flag(with_cp, cp_use_reentrant)
        self.make_all_block_plugins(planes, planes)

    def _make_conv2(self, width, stride, dilation, groups=1):
        """The 3x3 conv2, ``width`` channels in and out: ``dcn``'s layer (see the class
        docstring) or ``conv_cfg``'s."""
        cfg = self.conv_cfg
        if self.dcn is not None:
            dcn = dict(self.dcn)  # mmdet pops from the shared dict; a copy here
            fallback = dcn.pop('fallback_on_stride', False)
            if not (fallback and stride > 1):
                if cfg is not None:
                    raise ValueError(f'conv_cfg must be None for DCN (as mmdet), got '
                                     f'conv_cfg={cfg!r} with dcn={self.dcn!r}')
                cfg = dcn
        return build_conv_layer(cfg, width, width, 3, stride=stride, padding=dilation,
                                dilation=dilation, groups=groups, bias=False)

    def make_all_block_plugins(self, conv1_channels, conv2_channels):
        """(Re)build the plugins of the three positions, in mmdet's order."""
        self.plugin_names = {}
        if not self.with_plugins:
            return
        for position, channels in zip(self.PLUGIN_POSITIONS, (
                conv1_channels, conv2_channels, self.conv3.out_channels)):
            names = self.plugin_names[position] = []
            for plugin in self.plugins:
                if plugin['position'] != position:
                    continue
                cfg = dict(plugin['cfg'])
                name, layer = build_plugin_layer(cfg, in_channels=channels,
                                                 postfix=cfg.pop('postfix', ''))
                if name in self._modules or hasattr(self, name):
                    raise ValueError(f'duplicate plugin {name} (give each a postfix)')
                self.add_module(name, layer)
                names.append(name)

    def remove_all_block_plugins(self):
        for names in self.plugin_names.values():
            for name in names:
                delattr(self, name)
        self.plugin_names = {}

    def forward_plugin(self, x, position):
        for name in self.plugin_names.get(position, ()):
            x = getattr(self, name)(x)
        return x

    @property
    def norm3(self):
        return getattr(self, self.norm3_name)

    @property
    def last_norm(self):
        return self.norm3

    def _inner_forward(self, x):
        identity = x
        out = self.relu(self.norm1(self.conv1(x)))
        out = self.forward_plugin(out, 'after_conv1')
        out = self.relu(self.norm2(self.conv2(out)))
        out = self.forward_plugin(out, 'after_conv2')
        out = self.norm3(self.conv3(out))
        out = self.forward_plugin(out, 'after_conv3')
        if self.downsample is not None:
            identity = self.downsample(x)
        return out + identity


@MODELS.register_module()
class ResNet(BaseBackbone):
    """ResNet backbone, mmdet 2.x arguments.

    Args:
        depth (int): 18, 34 (BasicBlock), 50, 101, 152 (Bottleneck).
        with_cp (bool | tuple[bool]): ``'full'`` checkpointing of the units, for all stages
            or per stage; the stem follows the first stage's flag. Modes can be changed later
            with ``set_checkpoint_plan``; the attribute ``with_cp`` reads them (True when
            every unit is checkpointed: :attr:`BaseBackbone.with_cp`).
        cp_use_reentrant (bool): use torch's reentrant checkpoint instead of the default
            non-reentrant one (which also checkpoints a trainable block behind a frozen stage).
        frozen_stages (int): stages to freeze (stem and the first ``frozen_stages`` stages);
            -1 freezes nothing, 0 the stem only.
        norm_eval (bool): keep BatchNorm layers in eval mode while training.
        dcn (dict | None): a conv layer config (``dict(type='DCN' | 'DCNv2', deform_groups=1,
            fallback_on_stride=False)``) for the Bottleneck conv2s of the stages
            ``stage_with_dcn`` (one flag per stage) marks; ignored without a marked stage.
        init_cfg (dict): ``dict(type='Pretrained', checkpoint=PATH or 'torchvision://NAME')``;
            resolved offline (see :mod:`ckptzoo.runner.checkpoint`).
    """

    arch_settings = {
        18: (BasicBlock, (2, 2, 2, 2)),
        34: (BasicBlock, (3, 4, 6, 3)),
        50: (Bottleneck, (3, 4, 6, 3)),
        101: (Bottleneck, (3, 4, 23, 3)),
        152: (Bottleneck, (3, 8, 36, 3)),
    }

    def __init__(self, depth, in_channels=3, stem_channels=None, base_channels=64,
                 num_stages=4, strides=(1, 2, 2, 2), dilations=(1, 1, 1, 1),
                 out_indices=(0, 1, 2, 3), style='pytorch', deep_stem=False, avg_down=False,
                 frozen_stages=-1, conv_cfg=None, norm_cfg=dict(type='BN', requires_grad=True),
                 norm_eval=True, dcn=None, stage_with_dcn=(False, False, False, False),
                 plugins=None, with_cp=False, cp_use_reentrant=False, zero_init_residual=True,
                 pretrained=None, init_cfg=None):
        super().__init__()
        if depth not in self.arch_settings:
            raise ValueError(f'invalid depth {depth!r} for {type(self).__name__}: allowed are '
                           f'{", ".join(map(str, self.arch_settings))}')
        if not (isinstance(num_stages, int) and 1 <= num_stages <= 4):
            raise ValueError(f'num_stages must be an int in 1..4, got {num_stages!r}')
        if len(strides) < num_stages or len(dilations) < num_stages:
            raise ValueError(f'strides and dilations need {num_stages} entries (num_stages), '
                             f'got strides={strides!r}, dilations={dilations!r}')
        out_indices = self._check_out_indices(out_indices, num_stages)
        if style not in ('pytorch', 'caffe'):
            raise ValueError(f"style must be 'pytorch' or 'caffe', got {style!r}")
        self._check_frozen_stages(frozen_stages, num_stages)
        self._check_dcn(dcn, stage_with_dcn, num_stages, conv_cfg,
                        self.arch_settings[depth][0])
        if plugins is not None and not isinstance(plugins, list):
            raise ValueError(f'plugins must be a list of dicts, got {plugins!r}')
        for plugin in plugins or ():
            stages = plugin.get('stages') if isinstance(plugin, dict) else None
            if stages is not None and len(stages) != num_stages:
                raise ValueError(f'a plugin\'s stages need {num_stages} entries (num_stages), '
                                 f'got {plugin!r}')
        init_cfg = pretrained_to_init_cfg(pretrained, init_cfg)
        flags = self._stage_flags(with_cp, num_stages)
        self.cp_use_reentrant = cp_use_reentrant
        self.depth = depth
        self.stem_channels = stem_channels or base_channels
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
        self.conv_cfg = conv_cfg
        self.plugins = plugins
        self.dcn = dcn
        self.stage_with_dcn = stage_with_dcn
        self.norm_eval = norm_eval
        self.zero_init_residual = zero_init_residual
        self.init_cfg = init_cfg
        self.block, stage_blocks = self.arch_settings[depth]
        self.stage_blocks = stage_blocks[:num_stages]

        self._make_stem_layer(in_channels, self.stem_channels)
        self.stem_unit = CheckpointUnit.from_flag(flags[0], cp_use_reentrant)
        self.inplanes = self.stem_channels
        self.res_layers = []
        for i, num_blocks in enumerate(self.stage_blocks):
            planes = base_channels * 2**i
            extra = {}
            if plugins is not None:
                extra['plugins'] = self.make_stage_plugins(plugins, i)
            if dcn is not None and stage_with_dcn[i]:
                extra['dcn'] = dcn
            layer = self.make_res_layer(**extra,
                block=self.block, inplanes=self.inplanes, planes=planes, num_blocks=num_blocks,
                stride=strides[i], dilation=dilations[i], avg_down=avg_down, norm_cfg=norm_cfg,
                conv_cfg=conv_cfg,
                style=style, with_cp=flags[i], cp_use_reentrant=cp_use_reentrant)
            self.inplanes = planes * self.block.expansion
            name = f'layer{i + 1}'
            self.add_module(name, layer)
            self.res_layers.append(name)
        self.feat_dim = self.inplanes
        self._init_default_weights()
        self._freeze_stages()

    @staticmethod
    def _check_dcn(dcn, stage_with_dcn, num_stages, conv_cfg, block):
        """mmdet's refusals, named before anything is built: ``dcn`` a conv config dict,
        one ``stage_with_dcn`` flag per stage, no ``conv_cfg`` with it, no BasicBlock
        (ResNet-18/34) stage with it. Without ``dcn``, ``stage_with_dcn`` is ignored (mmdet)."""
        if dcn is None:
            return
        if not (isinstance(dcn, dict) and 'type' in dcn):
            raise ValueError(f'dcn must be None or a conv layer config dict with a "type" '
                             f"(e.g. dict(type='DCN', deform_groups=1)), got {dcn!r}")
        if not isinstance(stage_with_dcn, (tuple, list)) or len(stage_with_dcn) != num_stages:
            raise ValueError(f'stage_with_dcn needs {num_stages} flags (num_stages) with dcn, '
                             f'got {stage_with_dcn!r}')
        if not any(stage_with_dcn):
            return
        if not issubclass(block, Bottleneck):
            raise NotImplementedError(
                f'dcn needs Bottleneck blocks (depth 50, 101, 152): mmdet\'s BasicBlock '
                f'(ResNet-18/34) refuses it, got dcn={dcn!r}, stage_with_dcn={stage_with_dcn!r}')
        if conv_cfg is not None:
            raise ValueError(f'conv_cfg must be None for DCN (as mmdet), got conv_cfg='
                             f'{conv_cfg!r} with dcn={dcn!r}')

    def make_stage_plugins(self, plugins, stage_idx):
        """mmdet's: the plugins (``stages`` dropped) that apply to stage ``stage_idx``."""
        stage_plugins = []
        for plugin in plugins:
            plugin = dict(plugin)
            stages = plugin.pop('stages', None)
            if stages is None or stages[stage_idx]:
                stage_plugins.append(plugin)
        return stage_plugins

    def make_res_layer(self, **kwargs):
        """One stage (mmdet's hook: variants such as ResNeXt change the blocks here)."""
        return ResLayer(**kwargs)

    def _make_stem_layer(self, in_channels, stem_channels):
        if self.deep_stem:
            half = stem_channels // 2
            self.stem = nn.Sequential(
                _conv3x3(in_channels, half, stride=2, conv_cfg=self.conv_cfg),
                build_norm_layer(self.norm_cfg, half)[1], nn.ReLU(inplace=True),
                _conv3x3(half, half, conv_cfg=self.conv_cfg),
                build_norm_layer(self.norm_cfg, half)[1], nn.ReLU(inplace=True),
                _conv3x3(half, stem_channels, conv_cfg=self.conv_cfg),
                build_norm_layer(self.norm_cfg, stem_channels)[1], nn.ReLU(inplace=True))
        else:
            self.conv1 = build_conv_layer(self.conv_cfg, in_channels, stem_channels, 7, stride=2,
                                          padding=3, bias=False)
            self.norm1_name, norm1 = build_norm_layer(self.norm_cfg, stem_channels, postfix=1)
            self.add_module(self.norm1_name, norm1)
            self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)

    @property
    def norm1(self):
        return getattr(self, self.norm1_name)

    def _stem_modules(self):
        if self.deep_stem:
            return [self.stem, self.maxpool]
        return [self.conv1, self.norm1, self.relu, self.maxpool]

    def _stem_forward(self, x):
        if self.deep_stem:
            x = self.stem(x)
        else:
            x = self.relu(self.norm1(self.conv1(x)))
        return self.maxpool(x)

    def _plugin_layers(self):
        return [getattr(m, name) for m in self.modules() if isinstance(m, Bottleneck)
                for names in m.plugin_names.values() for name in names]

    def _init_default_weights(self):
        """torchvision's initialisation (kaiming fan_out convs, unit norms). Plugin layers
        as mmdet: loaded ``Pretrained``, they keep their own initialisation; otherwise their
        convs get the kaiming one too (bias 0), then ``init_weights`` where they have it.
        A deformable conv2 keeps mmcv's initialisation and its zero ``conv_offset`` (mmdet
        2.x's Kaiming ``layer='Conv2d'`` rule also draws the offset convs at random when no
        checkpoint is loaded, so a new DCN starts with random offsets; mmdet 1.x zeroed
        them, as here)."""
        plugins = self._plugin_layers()
        pretrained = isinstance(self.init_cfg, dict) and self.init_cfg.get('type') == 'Pretrained'
        skip = {id(m) for p in plugins for m in p.modules()} if pretrained else set()
        for dcn in (m for m in self.modules() if hasattr(m, 'conv_offset')):
            skip |= {id(m) for m in dcn.modules()}
        for m in self.modules():
            if id(m) in skip:
                continue
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode='fan_out', nonlinearity='relu')
                if m.bias is not None:
                    nn.init.constant_(m.bias, 0)
            elif isinstance(m, (_BatchNorm, nn.GroupNorm)) and m.weight is not None:
                nn.init.constant_(m.weight, 1)
                nn.init.constant_(m.bias, 0)
        for p in plugins:
            if not pretrained and hasattr(p, 'init_weights'):
                p.init_weights()
        if self.zero_init_residual:
            for m in self.modules():
                if isinstance(m, BasicBlock):  # Bottleneck too
                    nn.init.constant_(m.last_norm.weight, 0)

    def init_weights(self):
        """Load ``init_cfg=dict(type='Pretrained', checkpoint=...)`` if given."""
        load_pretrained(self, self.init_cfg, type(self).__name__)

    def _frozen_modules(self):
        stem = self._stem_modules() if self.frozen_stages >= 0 else []
        return stem + [getattr(self, f'layer{i}') for i in range(1, self.frozen_stages + 1)]

    def _checkpoint_steps(self):
        """One chain: the stem and the blocks; the last block of each stage in
        ``out_indices`` emits its output."""
        steps = [unit_step('stem', self.stem_unit, self._stem_forward, self._stem_modules())]
        for i, name in enumerate(self.res_layers):
            layer = getattr(self, name)
            for j, block in enumerate(layer):
                steps.append(chain_step(f'{name}.{j}', block.cp_unit, block, block,
                                        emit=i in self.out_indices and j == len(layer) - 1))
        return [steps]

    def forward(self, x):
        if getattr(self, '_cp_segments', None):
            _, outs = self._run_chain(self._checkpoint_steps()[0], x)
            return tuple(o for o in outs if o is not None)
        # no segment: the stages run as modules, so hooks on ``layerN`` fire as in mmdet
        x = self.stem_unit(self._stem_forward, x, module=self._stem_modules())
        outs = []
        for i, name in enumerate(self.res_layers):
            x = getattr(self, name)(x)
            if i in self.out_indices:
                outs.append(x)
        return tuple(outs)


@MODELS.register_module()
class ResNetV1d(ResNet):
    """ResNet-D: deep stem and average-pool downsampling (mmdet's ResNetV1d)."""

    def __init__(self, **kwargs):
        super().__init__(deep_stem=True, avg_down=True, **kwargs)
