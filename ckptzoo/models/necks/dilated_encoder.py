"""mmdet 2.x ``DilatedEncoder``, YOLOF's neck (Chen et al. 2021): on the last backbone output a
1x1 and a 3x3 conv (each with a BatchNorm, no activation), then residual bottlenecks with the
given dilations. One output.

Keys: ``lateral_conv.*``, ``lateral_norm.*``, ``fpn_conv.*``, ``fpn_norm.*``,
``dilated_encoder_blocks.{i}.conv{1,2,3}.{conv,bn}.*``.

Checkpoint units, one chain: ``lateral`` (both convs and norms), ``block{i}`` per bottleneck.
"""
import torch.nn as nn

from ...registry import MODELS
from ..checkpointing import CheckpointOwnerMixin, CheckpointUnit, unit_step
from ..utils import ConvModule, constant_init, normal_init

__all__ = ['DilatedEncoder']


class Bottleneck(nn.Module):
    """1x1 -> 3x3 (dilated) -> 1x1 ConvModules (BN, ReLU), plus the input."""

    def __init__(self, in_channels, mid_channels, dilation,
                 norm_cfg=dict(type='BN', requires_grad=True)):
        super().__init__()
        self.conv1 = ConvModule(in_channels, mid_channels, 1, norm_cfg=norm_cfg)
        self.conv2 = ConvModule(mid_channels, mid_channels, 3, padding=dilation,
                                dilation=dilation, norm_cfg=norm_cfg)
        self.conv3 = ConvModule(mid_channels, in_channels, 1, norm_cfg=norm_cfg)

    def forward(self, x):
        return self.conv3(self.conv2(self.conv1(x))) + x


@MODELS.register_module()
class DilatedEncoder(CheckpointOwnerMixin, nn.Module):
    """Args (mmdet's):
        in_channels (int): channels of the last backbone output.
        out_channels (int): channels of the output.
        block_mid_channels (int): bottleneck width.
        num_residual_blocks (int): number of bottlenecks.
        block_dilations (list[int]): dilation of each bottleneck.
        with_cp (bool): ``'full'`` on every unit (not an mmdet argument; default False).
        cp_use_reentrant (bool): torch's reentrant checkpoint.
    """

    def __init__(self, in_channels, out_channels, block_mid_channels, num_residual_blocks,
                 block_dilations, with_cp=False, cp_use_reentrant=False):
        super().__init__()
        if not isinstance(with_cp, bool):
            raise TypeError(f'DilatedEncoder with_cp must be a bool, got {with_cp!r}')
        if not isinstance(block_dilations, (list, tuple)) \
                or len(block_dilations) < num_residual_blocks:
            raise ValueError(f'DilatedEncoder block_dilations must list a dilation for each of '
                             f'the {num_residual_blocks} blocks, got {block_dilations!r}')
        self.in_channels = in_channels
        self.out_channels = out_channels
        self.block_mid_channels = block_mid_channels
        self.num_residual_blocks = num_residual_blocks
        self.block_dilations = block_dilations
        self.lateral_conv = nn.Conv2d(in_channels, out_channels, kernel_size=1)
        self.lateral_norm = nn.BatchNorm2d(out_channels)
        self.fpn_conv = nn.Conv2d(out_channels, out_channels, kernel_size=3, padding=1)
        self.fpn_norm = nn.BatchNorm2d(out_channels)
        self.dilated_encoder_blocks = nn.Sequential(*[
            Bottleneck(out_channels, block_mid_channels, dilation=block_dilations[i])
            for i in range(num_residual_blocks)])
        self.units = {name: CheckpointUnit.from_flag(with_cp, cp_use_reentrant)
                      for name in ['lateral'] + [f'block{i}'
                                                 for i in range(num_residual_blocks)]}
        self.init_weights()

    def init_weights(self):
        """mmdet's: Caffe2 Xavier on the two convs, N(0, 0.01) in the blocks, unit norms."""
        for conv in (self.lateral_conv, self.fpn_conv):
            nn.init.kaiming_uniform_(conv.weight, a=1, mode='fan_in', nonlinearity='leaky_relu')
            nn.init.zeros_(conv.bias)
        for m in (self.lateral_norm, self.fpn_norm):
            constant_init(m, 1)
        for m in self.dilated_encoder_blocks.modules():
            if isinstance(m, nn.Conv2d):
                normal_init(m, mean=0, std=0.01)
            elif isinstance(m, nn.BatchNorm2d):
                constant_init(m, 1)

    def _lateral(self, x):
        return self.fpn_norm(self.fpn_conv(self.lateral_norm(self.lateral_conv(x))))

    def _checkpoint_steps(self):
        lateral = [self.lateral_conv, self.lateral_norm, self.fpn_conv, self.fpn_norm]
        steps = [unit_step('lateral', self.units['lateral'], self._lateral, lateral)]
        steps += [unit_step(f'block{i}', self.units[f'block{i}'], block)
                  for i, block in enumerate(self.dilated_encoder_blocks)]
        return [steps]

    def forward(self, feature):
        out, _ = self._run_chain(self._checkpoint_steps()[0], feature[-1])
        return (out, )
