"""mmdet 2.x ``TridentResNet`` (TridentNet, Li et al. 2019): a three-stage ResNet (the C4
trunk) whose last stage runs ``num_branch`` branches that share every weight and differ only in
the dilation of their 3x3 convs (``trident_dilations``); its last block concatenates the
branches along the batch: ``(num_branch * B, C, H, W)``, branch-major. In eval with
``test_branch_idx >= 0`` only that branch runs (output ``(B, ...)``).

State-dict keys are ResNet's (``layer3.{j}.conv2.weight`` is the shared trident weight).
Checkpoint units are ResNet's: the stem and every block, trident blocks included (a block's
unit covers its branches' convs, norms and residual adds; the last ReLU stays outside).
"""
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.modules.utils import _pair

from ...registry import MODELS
from ..utils import build_norm_layer
from .resnet import Bottleneck, ResNet

__all__ = ['TridentConv', 'TridentBottleneck', 'TridentResNet']


class TridentConv(nn.Module):
    """One conv weight applied to each branch with its own dilation (padding = dilation);
    in eval with ``test_branch_idx >= 0`` to the one branch given, with that branch's
    dilation. Kaiming-uniform (fan_in) initialised, as mmdet's ``init_cfg`` asks."""

    def __init__(self, in_channels, out_channels, kernel_size, stride=1,
                 trident_dilations=(1, 2, 3), test_branch_idx=1, bias=False):
        super().__init__()
        self.num_branch = len(trident_dilations)
        self.with_bias = bias
        self.test_branch_idx = test_branch_idx
        self.stride = _pair(stride)
        self.kernel_size = _pair(kernel_size)
        self.paddings = _pair(trident_dilations)
        self.dilations = trident_dilations
        self.in_channels = in_channels
        self.out_channels = out_channels
        self.weight = nn.Parameter(torch.empty(out_channels, in_channels, *self.kernel_size))
        self.bias = nn.Parameter(torch.zeros(out_channels)) if bias else None
        nn.init.kaiming_uniform_(self.weight, a=0, mode='fan_in', nonlinearity='relu')

    def extra_repr(self):
        return (f'in_channels={self.in_channels}, out_channels={self.out_channels}, '
                f'kernel_size={self.kernel_size}, num_branch={self.num_branch}, '
                f'test_branch_idx={self.test_branch_idx}, stride={self.stride}, '
                f'dilations={self.dilations}, bias={self.with_bias}')

    def forward(self, inputs):
        """A list of branch inputs -> the list of their outputs."""
        if self.training or self.test_branch_idx == -1:
            return [F.conv2d(x, self.weight, self.bias, self.stride, padding, dilation)
                    for x, dilation, padding in zip(inputs, self.dilations, self.paddings)]
        if len(inputs) != 1:
            raise ValueError(f'TridentConv in eval with test_branch_idx='
                             f'{self.test_branch_idx} takes one branch, got {len(inputs)}')
        return [F.conv2d(inputs[0], self.weight, self.bias, self.stride,
                         self.paddings[self.test_branch_idx],
                         self.dilations[self.test_branch_idx])]


class TridentBottleneck(Bottleneck):
    """mmdet's ``TridentBottleneck``: a Bottleneck whose ``conv2`` is a :class:`TridentConv`.
    A tensor input is first repeated into the branches (the stage's first block); a list is
    one tensor per branch. ``concat_output`` (the stage's last block) concatenates them."""

    def __init__(self, trident_dilations, test_branch_idx, concat_output, inplanes, planes,
                 stride=1, dilation=1, downsample=None, style='pytorch', with_cp=False,
                 cp_use_reentrant=False, norm_cfg=dict(type='BN')):
        super().__init__(inplanes, planes, stride, dilation, downsample, style, with_cp,
                         cp_use_reentrant, norm_cfg)
        self.trident_dilations = trident_dilations
        self.num_branch = len(trident_dilations)
        self.concat_output = concat_output
        self.test_branch_idx = test_branch_idx
        self.planes = planes
        conv2_stride = stride if style == 'pytorch' else 1
        self.conv2 = TridentConv(planes, planes, kernel_size=3, stride=conv2_stride, bias=False,
                                 trident_dilations=trident_dilations,
                                 test_branch_idx=test_branch_idx)

    def _branches_forward(self, repeat, *xs):
        """mmdet's ``_inner_forward``, each layer over every branch in turn (so BatchNorm
        statistics update in mmdet's order)."""
        identity = xs
        if repeat:
            num_branch = self.num_branch if self.training or self.test_branch_idx == -1 else 1
            xs = xs * num_branch
            identity = xs
            if self.downsample is not None:
                identity = [self.downsample(b) for b in xs]
        out = [self.conv1(b) for b in xs]
        out = [self.norm1(b) for b in out]
        out = [self.relu(b) for b in out]
        out = self.conv2(out)
        out = [self.norm2(b) for b in out]
        out = [self.relu(b) for b in out]
        out = [self.conv3(b) for b in out]
        out = [self.norm3(b) for b in out]
        return tuple(o + i for o, i in zip(out, identity))

    def _repeat_forward(self, x):
        return self._branches_forward(True, x)

    def _list_forward(self, *xs):
        return self._branches_forward(False, *xs)

    def forward(self, x):
        if isinstance(x, (list, tuple)):
            out = self.cp_unit(self._list_forward, *x)
        else:
            out = self.cp_unit(self._repeat_forward, x)
        out = [self.relu(b) for b in out]
        return torch.cat(out, dim=0) if self.concat_output else out


def make_trident_res_layer(block, inplanes, planes, num_blocks, stride=1,
                           trident_dilations=(1, 2, 3), style='pytorch', with_cp=False,
                           cp_use_reentrant=False, norm_cfg=dict(type='BN'),
                           test_branch_idx=-1):
    """The trident stage (mmdet's): a 1x1 conv + norm downsample on the first block when the
    stride or width changes; the last block concatenates the branches."""
    downsample = None
    if stride != 1 or inplanes != planes * block.expansion:
        downsample = nn.Sequential(
            nn.Conv2d(inplanes, planes * block.expansion, 1, stride=stride, bias=False),
            build_norm_layer(norm_cfg, planes * block.expansion)[1])
    layers = []
    for i in range(num_blocks):
        layers.append(block(trident_dilations=trident_dilations, test_branch_idx=test_branch_idx,
                            concat_output=i == num_blocks - 1, inplanes=inplanes, planes=planes,
                            stride=stride if i == 0 else 1,
                            downsample=downsample if i == 0 else None, style=style,
                            with_cp=with_cp, cp_use_reentrant=cp_use_reentrant,
                            norm_cfg=norm_cfg))
        inplanes = planes * block.expansion
    return nn.Sequential(*layers)


@MODELS.register_module()
class TridentResNet(ResNet):
    """Args as mmdet 2.x: ``depth`` (50, 101, 152), ``num_branch`` (the length of
    ``trident_dilations``), ``test_branch_idx`` (-1: every branch at test), then ResNet's
    (``num_stages`` must be 3: the last stage is the trident one)."""

    def __init__(self, depth, num_branch, test_branch_idx, trident_dilations, **kwargs):
        if num_branch != len(trident_dilations):
            raise ValueError(f'num_branch ({num_branch}) must equal len(trident_dilations) '
                             f'{tuple(trident_dilations)}')
        if depth not in (50, 101, 152):
            raise ValueError(f'TridentResNet depth must be 50, 101 or 152, got {depth!r}')
        super().__init__(depth, **kwargs)
        if self.num_stages != 3:
            raise ValueError(f'TridentResNet needs num_stages=3, got {self.num_stages}')
        self.test_branch_idx = test_branch_idx
        self.num_branch = num_branch
        last = self.num_stages - 1
        old = getattr(self, f'layer{last + 1}')
        layer = make_trident_res_layer(
            TridentBottleneck, inplanes=self.block.expansion * self.base_channels * 2**(last - 1),
            planes=self.base_channels * 2**last, num_blocks=self.stage_blocks[last],
            stride=self.strides[last], trident_dilations=trident_dilations, style=self.style,
            with_cp=old[0].cp_unit.mode is not None, cp_use_reentrant=self.cp_use_reentrant,
            norm_cfg=self.norm_cfg, test_branch_idx=test_branch_idx)
        self._init_trident_weights(layer)
        setattr(self, f'layer{last + 1}', layer)
        self._freeze_stages()

    def _init_trident_weights(self, layer):
        """ResNet's default init for the new stage's convs and norms (the trident convs keep
        their own)."""
        for m in layer.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode='fan_out', nonlinearity='relu')
            elif isinstance(m, nn.modules.batchnorm._BatchNorm) and m.weight is not None:
                nn.init.constant_(m.weight, 1)
                nn.init.constant_(m.bias, 0)
        if self.zero_init_residual:
            for block in layer:
                nn.init.constant_(block.norm3.weight, 0)

