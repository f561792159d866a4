"""mmdet 2.x ``CoarseMaskHead`` (PointRend's coarse mask): an :class:`FCNMaskHead` that
downsamples instead of upsampling, then predicts every class's small mask with fully connected
layers (``fcs``, ``fc_logits``), which PointRend's point head then refines.

State-dict keys are mmdet's (``convs.{i}``, ``downsample_conv.conv``, ``fcs.{i}``,
``fc_logits``; no ``conv_logits`` and no ``upsample``).
"""
import torch.nn as nn

from ....registry import MODELS
from ....runner.fp16 import auto_fp16
from ...utils import ConvModule, apply_init_cfg
from .fcn_mask_head import FCNMaskHead

__all__ = ['CoarseMaskHead']


@MODELS.register_module()
class CoarseMaskHead(FCNMaskHead):
    """Args as mmdet 2.x: ``num_convs`` (default 0), ``num_fcs`` (> 0), ``fc_out_channels``,
    ``downsample_factor`` (>= 1: a ``k x k`` stride-``k`` ConvModule when > 1), ``init_cfg``
    (default Xavier on ``fcs``, constant 0.001 on ``fc_logits``), the rest
    :class:`FCNMaskHead`'s (``upsample_cfg`` is fixed to none). The output is
    ``(n, num_classes, roi_feat_size // downsample_factor, ...)``."""

    def __init__(self, num_convs=0, num_fcs=2, fc_out_channels=1024, downsample_factor=2,
                 init_cfg=dict(type='Xavier', override=[
                     dict(name='fcs'), dict(type='Constant', val=0.001, name='fc_logits')]),
                 *args, **kwargs):
        super().__init__(*args, num_convs=num_convs, upsample_cfg=dict(type=None),
                         init_cfg=None, **kwargs)
        if not (isinstance(num_fcs, int) and num_fcs > 0):
            raise ValueError(f'CoarseMaskHead num_fcs must be a positive int, got {num_fcs!r}')
        if not (isinstance(downsample_factor, int) and downsample_factor >= 1):
            raise ValueError(f'CoarseMaskHead downsample_factor must be an int >= 1, got '
                             f'{downsample_factor!r}')
        self.init_cfg = init_cfg
        self.num_fcs = num_fcs
        self.fc_out_channels = fc_out_channels
        self.downsample_factor = downsample_factor
        del self.conv_logits
        if downsample_factor > 1:
            in_channels = self.conv_out_channels if self.num_convs > 0 else self.in_channels
            self.downsample_conv = ConvModule(in_channels, self.conv_out_channels,
                                              kernel_size=downsample_factor,
                                              stride=downsample_factor, padding=0,
                                              conv_cfg=self.conv_cfg, norm_cfg=self.norm_cfg)
        else:
            self.downsample_conv = None
        self.output_size = (self.roi_feat_size[0] // downsample_factor,
                            self.roi_feat_size[1] // downsample_factor)
        self.output_area = self.output_size[0] * self.output_size[1]
        last_dim = self.conv_out_channels * self.output_area
        self.fcs = nn.ModuleList()
        for i in range(num_fcs):
            self.fcs.append(nn.Linear(last_dim if i == 0 else fc_out_channels, fc_out_channels))
        self.fc_logits = nn.Linear(fc_out_channels, self.num_classes * self.output_area)
        apply_init_cfg(self, init_cfg)

    def init_weights(self):
        """The layers were initialised at construction (``init_cfg``)."""

    @auto_fp16()
    def forward(self, x):
        """(n, in_channels, h, w) RoI features -> (n, classes, *output_size) mask logits."""
        for conv in self.convs:
            x = conv(x)
        if self.downsample_conv is not None:
            x = self.downsample_conv(x)
        x = x.flatten(1)
        for fc in self.fcs:
            x = self.relu(fc(x))
        return self.fc_logits(x).view(x.size(0), self.num_classes, *self.output_size)
