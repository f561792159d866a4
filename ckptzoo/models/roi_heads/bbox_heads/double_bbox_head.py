"""mmdet 2.x ``DoubleConvFCBBoxHead`` (Double-Head R-CNN, Wu et al. 2020): classification from
fully connected layers, box regression from convolutions, each on its own RoI features::

    x_cls (RoI features)            -> fc_branch   -> fc_cls
    x_reg (RoI features, enlarged)  -> res_block -> conv_branch (Bottlenecks) -> avg pool -> fc_reg

State-dict keys are mmdet's (``res_block.conv1.conv.weight``, ``conv_branch.0.conv1.weight``,
``conv_branch.0.bn1.*``, ``fc_branch.0.weight``, ``fc_cls``, ``fc_reg``), in mmdet's order.
"""
import torch.nn as nn

from ....registry import MODELS
from ...backbones.resnet import Bottleneck
from ...utils import ConvModule
from .bbox_head import BBoxHead

__all__ = ['BasicResBlock', 'DoubleConvFCBBoxHead']


class BasicResBlock(nn.Module):
    """mmdet's block that widens the regression features: a 3x3 then a 1x1 ConvModule, plus a
    1x1 ConvModule on the identity path, then ReLU (a 1x1 second conv, unlike ResNet's)."""

    def __init__(self, in_channels, out_channels, conv_cfg=None, norm_cfg=dict(type='BN'),
                 init_cfg=None):
        super().__init__()
        self.conv1 = ConvModule(in_channels, in_channels, 3, padding=1, bias=False,
                                conv_cfg=conv_cfg, norm_cfg=norm_cfg)
        self.conv2 = ConvModule(in_channels, out_channels, 1, bias=False, conv_cfg=conv_cfg,
                                norm_cfg=norm_cfg, act_cfg=None)
        self.conv_identity = ConvModule(in_channels, out_channels, 1, conv_cfg=conv_cfg,
                                        norm_cfg=norm_cfg, act_cfg=None)
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x):
        out = self.conv2(self.conv1(x)) + self.conv_identity(x)
        return self.relu(out)


@MODELS.register_module()
class DoubleConvFCBBoxHead(BBoxHead):
    """Args (mmdet 2.x's):
        num_convs (int): Bottleneck blocks of the regression branch (> 0).
        num_fcs (int): fully connected layers of the classification branch (> 0).
        conv_out_channels (int): channels of the regression branch (``BasicResBlock`` output,
            each Bottleneck's ``planes * 4``).
        fc_out_channels (int): width of the classification fcs.
        conv_cfg (None), norm_cfg (dict): of the Bottlenecks; the ``BasicResBlock`` always
            uses ``dict(type='BN')``, as mmdet builds it with its own defaults.
        init_cfg (dict): mmdet's default: Normal std 0.01 on ``fc_cls``, 0.001 on ``fc_reg``,
            Xavier uniform on ``fc_branch``; the convolutions keep their own initialisation.
        with_avg_pool (bool): default True here, and required (mmdet asserts it).
        BBoxHead's other arguments.

    ``forward(x_cls, x_reg)`` takes the two RoI feature maps (:class:`DoubleHeadRoIHead`).
    """

    def __init__(self, num_convs=0, num_fcs=0, conv_out_channels=1024, fc_out_channels=1024,
                 conv_cfg=None, norm_cfg=dict(type='BN'),
                 init_cfg=dict(type='Normal', override=[
                     dict(type='Normal', name='fc_cls', std=0.01),
                     dict(type='Normal', name='fc_reg', std=0.001),
                     dict(type='Xavier', name='fc_branch', distribution='uniform')]),
                 **kwargs):
        kwargs.setdefault('with_avg_pool', True)
        if not kwargs['with_avg_pool']:
            raise ValueError('DoubleConvFCBBoxHead needs with_avg_pool=True (the regression '
                             'branch pools its conv features)')
        for name, value in (('num_convs', num_convs), ('num_fcs', num_fcs)):
            if not (isinstance(value, int) and value > 0):
                raise ValueError(f'DoubleConvFCBBoxHead {name} must be an int > 0, got '
                                 f'{value!r}')
        if conv_cfg is not None:
            raise NotImplementedError(f'DoubleConvFCBBoxHead supports conv_cfg=None only (its '
                                      f'Bottlenecks use nn.Conv2d), got {conv_cfg!r}')
        if conv_out_channels % 4:
            raise ValueError(f'conv_out_channels must be a multiple of 4 (Bottleneck '
                             f'expansion), got {conv_out_channels!r}')
        self.num_convs = num_convs
        self.num_fcs = num_fcs
        self.conv_out_channels = conv_out_channels
        self.fc_out_channels = fc_out_channels
        self.conv_cfg = conv_cfg
        self.norm_cfg = norm_cfg
        super().__init__(init_cfg=init_cfg, **kwargs)

    def _init_layers(self):
        self.avg_pool = nn.AvgPool2d(self.roi_feat_size)
        # mmdet's BBoxHead registers fc_cls / fc_reg first; they are rebuilt at the end
        self.add_module('fc_cls', None)
        self.add_module('fc_reg', None)
        self.res_block = BasicResBlock(self.in_channels, self.conv_out_channels)
        self.conv_branch = nn.ModuleList([
            Bottleneck(self.conv_out_channels, self.conv_out_channels // 4,
                       norm_cfg=self.norm_cfg) for _ in range(self.num_convs)])
        self.fc_branch = nn.ModuleList([
            nn.Linear(self.in_channels * self.roi_feat_area if i == 0 else self.fc_out_channels,
                      self.fc_out_channels) for i in range(self.num_fcs)])
        self.fc_reg = nn.Linear(self.conv_out_channels,
                                4 if self.reg_class_agnostic else 4 * self.num_classes)
        self.fc_cls = nn.Linear(self.fc_out_channels, self.num_classes + 1)
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x_cls, x_reg):
        """``x_cls``, ``x_reg`` ``[K, C, h, w]`` -> ``(cls_score, bbox_pred)``."""
        x_conv = self.res_block(x_reg)
        for conv in self.conv_branch:
            x_conv = conv(x_conv)
        bbox_pred = self.fc_reg(self.avg_pool(x_conv).flatten(1))
        x_fc = x_cls.flatten(1)
        for fc in self.fc_branch:
            x_fc = self.relu(fc(x_fc))
        return self.fc_cls(x_fc), bbox_pred
