"""mmdet 2.x ``HourglassNet`` (Newell et al. 2016; CornerNet's Hourglass-104 / -52): a stem
(7x7 stride-2 ConvModule, a stride-2 BasicBlock), then ``num_stacks`` recursive hourglass
modules, each followed by a 3x3 ConvModule whose output is one of the outputs; between stacks
the input and the output are merged (1x1 ConvModules, ReLU, a BasicBlock). Keys as mmdet's
(``stem.*``, ``hourglass_modules.{i}.up1/low1/low2/low3.*``, ``inters.*``, ``conv1x1s.*``,
``out_convs.*``, ``remap_convs.*``).

mmdet built the inner hourglass levels without the given ``norm_cfg`` / ``upsample_cfg`` (the
defaults); here they get them (identical for every mmdet config, which use the defaults).

Checkpoint units, one chain: ``stem``, then ``stack{i}`` (hourglass ``i``, its output conv and,
but for the last, the merge into the next stack's input), each stack's output leaving.
"""
from functools import partial

import torch.nn as nn
import torch.nn.functional as F

from ...registry import MODELS
from ..checkpointing import ChainStep, CheckpointOwnerMixin, CheckpointUnit
from ..utils import ConvModule, ResLayer
from .resnet import BasicBlock

__all__ = ['HourglassNet', 'HourglassModule']


class HourglassModule(nn.Module):
    """One hourglass of ``depth`` recursive levels: ``up1(x) + upsample(low3(low2(low1(x))))``,
    ``low1`` halving the resolution."""

    def __init__(self, depth, stage_channels, stage_blocks,
                 norm_cfg=dict(type='BN', requires_grad=True), init_cfg=None,
                 upsample_cfg=dict(mode='nearest')):
        super().__init__()
        self.depth = depth
        cur_block, next_block = stage_blocks[0], stage_blocks[1]
        cur_channel, next_channel = stage_channels[0], stage_channels[1]
        self.up1 = ResLayer(BasicBlock, cur_channel, cur_channel, cur_block, norm_cfg=norm_cfg)
        self.low1 = ResLayer(BasicBlock, cur_channel, next_channel, cur_block, stride=2,
                             norm_cfg=norm_cfg)
        if depth > 1:
            self.low2 = HourglassModule(depth - 1, stage_channels[1:], stage_blocks[1:],
                                        norm_cfg=norm_cfg, upsample_cfg=upsample_cfg)
        else:
            self.low2 = ResLayer(BasicBlock, next_channel, next_channel, next_block,
                                 norm_cfg=norm_cfg)
        self.low3 = ResLayer(BasicBlock, next_channel, cur_channel, cur_block,
                             norm_cfg=norm_cfg, downsample_first=False)
        self.up2 = F.interpolate
        self.upsample_cfg = upsample_cfg

    def forward(self, x):
        up1 = self.up1(x)
        low3 = self.low3(self.low2(self.low1(x)))
        if 'scale_factor' in self.upsample_cfg:
            up2 = self.up2(low3, **self.upsample_cfg)
        else:  # to up1's size: odd sizes do not break
            up2 = self.up2(low3, size=up1.shape[2:], **self.upsample_cfg)
        return up1 + up2


@MODELS.register_module()
class HourglassNet(CheckpointOwnerMixin, nn.Module):
    """Args (mmdet's):
        downsample_times (int): levels of each hourglass (5).
        num_stacks (int): hourglasses (1: Hourglass-52, 2: Hourglass-104).
        stage_channels (list[int]), stage_blocks (list[int]): per hourglass level.
        feat_channel (int): channels of the outputs (256).
        norm_cfg (dict): BN by default.
        pretrained, init_cfg: must be None (mmdet refuses an init_cfg; every Conv2d takes
            PyTorch's default init, as mmdet's ``init_weights``).
        with_cp (bool): ``'full'`` on every unit (not an mmdet argument; default False).
        cp_use_reentrant (bool): torch's reentrant checkpoint.
    """

    def __init__(self, downsample_times=5, num_stacks=2,
                 stage_channels=(256, 256, 384, 384, 384, 512), stage_blocks=(2, 2, 2, 2, 2, 4),
                 feat_channel=256, norm_cfg=dict(type='BN', requires_grad=True),
                 pretrained=None, init_cfg=None, with_cp=False, cp_use_reentrant=False):
        super().__init__()
        if init_cfg is not None or pretrained is not None:
            raise ValueError(f'HourglassNet takes no init_cfg / pretrained (as mmdet), got '
                             f'{init_cfg or pretrained!r}')
        if not (isinstance(num_stacks, int) and num_stacks >= 1):
            raise ValueError(f'HourglassNet num_stacks must be an int >= 1, got {num_stacks!r}')
        if len(stage_channels) != len(stage_blocks):
            raise ValueError(f'HourglassNet stage_channels and stage_blocks need one length, '
                             f'got {stage_channels!r} and {stage_blocks!r}')
        if len(stage_channels) <= downsample_times:
            raise ValueError(f'HourglassNet needs more than downsample_times '
                             f'({downsample_times}) stages, got {len(stage_channels)}')
        if not isinstance(with_cp, bool):
            raise TypeError(f'HourglassNet with_cp must be a bool, got {with_cp!r}')
        self.num_stacks = num_stacks
        self.init_cfg = init_cfg
        cur_channel = stage_channels[0]
        self.stem = nn.Sequential(
            ConvModule(3, cur_channel // 2, 7, padding=3, stride=2, norm_cfg=norm_cfg),
            ResLayer(BasicBlock, cur_channel // 2, cur_channel, 1, stride=2, norm_cfg=norm_cfg))
        self.hourglass_modules = nn.ModuleList([
            HourglassModule(downsample_times, stage_channels, stage_blocks, norm_cfg=norm_cfg)
            for _ in range(num_stacks)])
        self.inters = ResLayer(BasicBlock, cur_channel, cur_channel, num_stacks - 1,
                               norm_cfg=norm_cfg)
        self.conv1x1s = nn.ModuleList([
            ConvModule(cur_channel, cur_channel, 1, norm_cfg=norm_cfg, act_cfg=None)
            for _ in range(num_stacks - 1)])
        self.out_convs = nn.ModuleList([
            ConvModule(cur_channel, feat_channel, 3, padding=1, norm_cfg=norm_cfg)
            for _ in range(num_stacks)])
        self.remap_convs = nn.ModuleList([
            ConvModule(feat_channel, cur_channel, 1, norm_cfg=norm_cfg, act_cfg=None)
            for _ in range(num_stacks - 1)])
        self.relu = nn.ReLU(inplace=True)
        self.units = {name: CheckpointUnit.from_flag(with_cp, cp_use_reentrant)
                      for name in ['stem'] + [f'stack{i}' for i in range(num_stacks)]}
        self.init_weights()

    def init_weights(self):
        """mmdet's: PyTorch's default init of every Conv2d (BN weight 1, bias 0)."""
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                m.reset_parameters()

    def _stack_modules(self, i):
        mods = [self.hourglass_modules[i], self.out_convs[i]]
        if i < self.num_stacks - 1:
            mods += [self.conv1x1s[i], self.remap_convs[i], self.inters[i]]
        return mods

    def _stack(self, i, inter):
        out = self.out_convs[i](self.hourglass_modules[i](inter))
        if i == self.num_stacks - 1:
            return out, out
        inter = self.conv1x1s[i](inter) + self.remap_convs[i](out)
        return self.inters[i](self.relu(inter)), out

    def _stem_step(self, x):
        out = self.units['stem'](self.stem, x, module=self.stem)
        return out, None

    def _stack_step(self, i, inter):
        mods = self._stack_modules(i)
        return self.units[f'stack{i}'](partial(self._stack, i), inter, module=mods)

    def _checkpoint_steps(self):
        steps = [ChainStep('stem', self.units['stem'], self._stem_step, self.stem)]
        steps += [ChainStep(f'stack{i}', self.units[f'stack{i}'], partial(self._stack_step, i),
                            self._stack_modules(i), leaves=True)
                  for i in range(self.num_stacks)]
        return [steps]

    def forward(self, x):
        _, outs = self._run_chain(self._checkpoint_steps()[0], x)
        return outs[1:]
