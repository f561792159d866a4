"""Feature Pyramid Network, mmdet 2.x arguments, semantics and state-dict keys.

Keys: ``lateral_convs.{i}.conv.*`` for the 1x1 laterals, ``fpn_convs.{i}.conv.*`` for the 3x3
output convs followed by the extra (stride 2) convs, so mmdet 2.x checkpoints load unchanged.
"""
import torch.nn as nn
import torch.nn.functional as F

from ...registry import MODELS
from ...runner.checkpoint import load_checkpoint
from ...runner.fp16 import auto_fp16
from ..utils import ConvModule, apply_init_cfg

__all__ = ['FPN']

_EXTRA_MODES = ('on_input', 'on_lateral', 'on_output')


@MODELS.register_module()
class FPN(nn.Module):
    """FPN (Lin et al. 2017) as mmdet 2.x.

    Args:
        in_channels (list[int]): channels of each backbone output.
        out_channels (int): channels of every pyramid level.
        num_outs (int): number of pyramid levels returned.
        start_level (int): first backbone output used (RetinaNet: 1, i.e. from stride 8).
        end_level (int): last backbone output used, -1 for the last; when it is not the last,
            no extra level is allowed (``num_outs == end_level - start_level + 1``).
        add_extra_convs (bool | str): how levels beyond the backbone's are made: False
            (max-pool, stride 2, of the last output), or a stride-2 3x3 conv on 'on_input'
            (the last used backbone output; True means this), 'on_lateral' or 'on_output'.
        relu_before_extra_convs (bool): ReLU before every extra conv but the first.
        no_norm_on_lateral (bool): no norm in the lateral convs even if ``norm_cfg`` is given.
        upsample_cfg (dict): ``F.interpolate`` arguments; without ``scale_factor`` the top-down
            path is resized to the lower level's size.
        init_cfg (dict): mmcv init_cfg, applied at construction (default Xavier uniform).
    """

    def __init__(self, in_channels, out_channels, num_outs, start_level=0, end_level=-1,
                 add_extra_convs=False, relu_before_extra_convs=False, no_norm_on_lateral=False,
                 conv_cfg=None, norm_cfg=None, act_cfg=None, upsample_cfg=dict(mode='nearest'),
                 init_cfg=dict(type='Xavier', layer='Conv2d', distribution='uniform')):
        super().__init__()
        if not isinstance(in_channels, (list, tuple)) or not in_channels:
            raise TypeError(f'in_channels must be a non-empty list of ints, got {in_channels!r}')
        self.in_channels = list(in_channels)
        self.out_channels = out_channels
        self.num_ins = len(in_channels)
        self.num_outs = num_outs
        self.relu_before_extra_convs = relu_before_extra_convs
        self.no_norm_on_lateral = no_norm_on_lateral
        self.fp16_enabled = False
        self.upsample_cfg = dict(upsample_cfg)
        self.init_cfg = init_cfg
        if not 0 <= start_level < self.num_ins:
            raise ValueError(f'start_level must be in 0..{self.num_ins - 1} (one per input), '
                             f'got {start_level!r}')
        if end_level == -1 or end_level == self.num_ins - 1:
            self.backbone_end_level = self.num_ins
            if num_outs < self.num_ins - start_level:
                raise ValueError(f'num_outs must be at least {self.num_ins - start_level} '
                                 f'(inputs from start_level {start_level}), got {num_outs!r}')
        else:
            if not start_level <= end_level < self.num_ins:
                raise ValueError(f'end_level must be -1 or in {start_level}..'
                                 f'{self.num_ins - 1}, got {end_level!r}')
            self.backbone_end_level = end_level + 1
            if num_outs != end_level - start_level + 1:
                raise ValueError(f'with end_level={end_level} no extra level is allowed: '
                                 f'num_outs must be {end_level - start_level + 1}, '
                                 f'got {num_outs!r}')
        self.start_level = start_level
        self.end_level = end_level
        if add_extra_convs is True:
            add_extra_convs = 'on_input'
        elif isinstance(add_extra_convs, str) and add_extra_convs not in _EXTRA_MODES:
            raise ValueError(f'add_extra_convs must be a bool or one of {", ".join(_EXTRA_MODES)}'
                             f', got {add_extra_convs!r}')
        elif not isinstance(add_extra_convs, (str, bool)):
            raise TypeError(f'add_extra_convs must be a bool or a str, got {add_extra_convs!r}')
        self.add_extra_convs = add_extra_convs

        self.lateral_convs = nn.ModuleList()
        self.fpn_convs = nn.ModuleList()
        for i in range(self.start_level, self.backbone_end_level):
            self.lateral_convs.append(ConvModule(
                in_channels[i], out_channels, 1, conv_cfg=conv_cfg,
                norm_cfg=None if no_norm_on_lateral else norm_cfg, act_cfg=act_cfg,
                inplace=False))
            self.fpn_convs.append(ConvModule(
                out_channels, out_channels, 3, padding=1, conv_cfg=conv_cfg, norm_cfg=norm_cfg,
                act_cfg=act_cfg, inplace=False))
        extra_levels = num_outs - self.backbone_end_level + self.start_level
        if self.add_extra_convs and extra_levels >= 1:
            for i in range(extra_levels):
                if i == 0 and self.add_extra_convs == 'on_input':
                    channels = self.in_channels[self.backbone_end_level - 1]
                else:
                    channels = out_channels
                self.fpn_convs.append(ConvModule(
                    channels, out_channels, 3, stride=2, padding=1, conv_cfg=conv_cfg,
                    norm_cfg=norm_cfg, act_cfg=act_cfg, inplace=False))
        apply_init_cfg(self, init_cfg)

    def init_weights(self):
        """Load a ``Pretrained`` init_cfg; the other kinds were applied at construction."""
        if isinstance(self.init_cfg, dict) and self.init_cfg.get('type') == 'Pretrained':
            load_checkpoint(self, self.init_cfg['checkpoint'], map_location='cpu',
                            strict=False, prefix=self.init_cfg.get('prefix'))

    @auto_fp16()
    def forward(self, inputs):
        if len(inputs) != len(self.in_channels):
            raise ValueError(f'FPN expects {len(self.in_channels)} inputs (in_channels), '
                             f'got {len(inputs)}')
        laterals = [conv(inputs[i + self.start_level])
                    for i, conv in enumerate(self.lateral_convs)]
        used_levels = len(laterals)
        for i in range(used_levels - 1, 0, -1):
            if 'scale_factor' in self.upsample_cfg:
                up = F.interpolate(laterals[i], **self.upsample_cfg)
            else:
                up = F.interpolate(laterals[i], size=laterals[i - 1].shape[2:],
                                   **self.upsample_cfg)
            laterals[i - 1] = laterals[i - 1] + up
        outs = [self.fpn_convs[i](laterals[i]) for i in range(used_levels)]
        if self.num_outs > len(outs):
            if not self.add_extra_convs:
                for _ in range(self.num_outs - used_levels):
                    outs.append(F.max_pool2d(outs[-1], 1, stride=2))
            else:
                if self.add_extra_convs == 'on_input':
                    source = inputs[self.backbone_end_level - 1]
                elif self.add_extra_convs == 'on_lateral':
                    source = laterals[-1]
                else:
                    source = outs[-1]
                outs.append(self.fpn_convs[used_levels](source))
                for i in range(used_levels + 1, self.num_outs):
                    x = F.relu(outs[-1]) if self.relu_before_extra_convs else outs[-1]
                    outs.append(self.fpn_convs[i](x))
        return tuple(outs)
