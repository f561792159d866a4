"""mmdet 2.x ``mmdet/models/utils/res_layer.py``: ``ResLayer`` (a stage of ``num_blocks``
blocks, an ``nn.Sequential`` so that its state-dict keys are ``{i}.*``) and SCNet's
``SimplifiedBasicBlock`` (a basic block whose norm is optional and that has no last ReLU),
which SCNet's mask, semantic and global context heads stack with ``conv_to_res``."""
import torch.nn as nn

from .builder import build_conv_layer
from .norm import build_norm_layer

__all__ = ['ResLayer', 'SimplifiedBasicBlock']


class ResLayer(nn.Sequential):
    """mmdet's arguments: ``block`` (a class with ``expansion``), ``inplanes``, ``planes``,
    ``num_blocks``, ``stride``, ``avg_down``, ``conv_cfg``, ``norm_cfg``,
    ``downsample_first``; other keywords go to every block."""

    def __init__(self, block, inplanes, planes, num_blocks, stride=1, avg_down=False,
                 conv_cfg=None, norm_cfg=dict(type='BN'), downsample_first=True, **kwargs):
        self.block = block
        downsample = None
        if stride != 1 or inplanes != planes * block.expansion:
            layers, conv_stride = [], stride
            if avg_down:
                conv_stride = 1
                layers.append(nn.AvgPool2d(kernel_size=stride, stride=stride, ceil_mode=True,
                                           count_include_pad=False))
            layers += [build_conv_layer(conv_cfg, inplanes, planes * block.expansion, 1,
                                        stride=conv_stride, bias=False),
                       build_norm_layer(norm_cfg, planes * block.expansion)[1]]
            downsample = nn.Sequential(*layers)
        common = dict(conv_cfg=conv_cfg, norm_cfg=norm_cfg, **kwargs)
        if downsample_first:
            blocks = [block(inplanes, planes, stride=stride, downsample=downsample, **common)]
            inplanes = planes * block.expansion
            blocks += [block(inplanes, planes, stride=1, **common)
                       for _ in range(1, num_blocks)]
        else:  # downsample_first=False is for HourglassModule
            blocks = [block(inplanes, inplanes, stride=1, **common)
                      for _ in range(num_blocks - 1)]
            blocks.append(block(inplanes, planes, stride=stride, downsample=downsample,
                                **common))
        super().__init__(*blocks)


class SimplifiedBasicBlock(nn.Module):
    """``conv1 (-> norm1) -> ReLU -> conv2 (-> norm2)``, plus the identity (or
    ``downsample``); convs have a bias only without norm (mmdet's). ``dcn``, ``plugins`` and
    ``with_cp`` are refused, as mmdet."""
    expansion = 1

    def __init__(self, inplanes, planes, stride=1, dilation=1, downsample=None,
                 style='pytorch', with_cp=False, conv_cfg=None, norm_cfg=dict(type='BN'),
                 dcn=None, plugins=None, init_fg=None):
        super().__init__()
        for name, value in (('dcn', dcn), ('plugins', plugins)):
            if value is not None:
                raise NotImplementedError(f'SimplifiedBasicBlock {name} is not implemented '
                                          f'(as mmdet), got {value!r}')
        if with_cp:
            raise NotImplementedError('SimplifiedBasicBlock with_cp is not implemented (as '
                                      'mmdet); checkpoint the head that holds it instead')
        self.with_norm = norm_cfg is not None
        with_bias = norm_cfg is None
        self.conv1 = build_conv_layer(conv_cfg, inplanes, planes, 3, stride=stride,
                                      padding=dilation, dilation=dilation, bias=with_bias)
        if self.with_norm:
            self.norm1_name, norm1 = build_norm_layer(norm_cfg, planes, postfix=1)
            self.add_module(self.norm1_name, norm1)
        self.conv2 = build_conv_layer(conv_cfg, planes, planes, 3, padding=1, bias=with_bias)
        if self.with_norm:
            self.norm2_name, norm2 = build_norm_layer(norm_cfg, planes, postfix=2)
            self.add_module(self.norm2_name, norm2)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = downsample
        self.stride = stride
        self.dilation = dilation
        self.with_cp = with_cp

    @property
    def norm1(self):
        return getattr(self, self.norm1_name) if self.with_norm else None

    @property
    def norm2(self):
        return getattr(self, self.norm2_name) if self.with_norm else None

    def forward(self, x):
        out = self.conv1(x)
        if self.with_norm:
            out = self.norm1(out)
        out = self.relu(out)
        out = self.conv2(out)
        if self.with_norm:
            out = self.norm2(out)
        identity = x if self.downsample is None else self.downsample(x)
        return out + identity
