"""mmdet 2.x ``FeatureRelayHead`` (SCNet): the box head's shared feature of each positive RoI
through one Linear, reshaped to ``(out_conv_channels, roi_feat_size, roi_feat_size)`` and
upsampled (bilinear, ``align_corners=True``) to the mask RoI size, added to the mask
features."""
import torch.nn as nn

from ....registry import MODELS
from ....runner.fp16 import auto_fp16
from ...utils import apply_init_cfg

__all__ = ['FeatureRelayHead']


@MODELS.register_module()
class FeatureRelayHead(nn.Module):
    """Args (mmdet's): in_channels (1024), out_conv_channels (256), roi_feat_size (7, an
    int), scale_factor (2), init_cfg (Kaiming on the Linear)."""

    def __init__(self, in_channels=1024, out_conv_channels=256, roi_feat_size=7,
                 scale_factor=2, init_cfg=dict(type='Kaiming', layer='Linear')):
        super().__init__()
        if not isinstance(roi_feat_size, int):
            raise TypeError(f'FeatureRelayHead roi_feat_size must be an int, got '
                            f'{roi_feat_size!r}')
        self.in_channels = in_channels
        self.out_conv_channels = out_conv_channels
        self.roi_feat_size = roi_feat_size
        self.out_channels = (roi_feat_size**2) * out_conv_channels
        self.scale_factor = scale_factor
        self.fp16_enabled = False
        self.fc = nn.Linear(self.in_channels, self.out_channels)
        self.upsample = nn.Upsample(scale_factor=scale_factor, mode='bilinear',
                                    align_corners=True)
        self.init_cfg = init_cfg
        apply_init_cfg(self, init_cfg)

    def init_weights(self):
        """The ``init_cfg`` was applied at construction."""

    @auto_fp16()
    def forward(self, x):
        """``(N, in_channels)`` -> ``(N, out_conv_channels, s * r, s * r)``; None for no RoI
        (as mmdet: nothing is relayed)."""
        n = x.shape[0]
        if n == 0:
            return None
        x = self.fc(x).reshape(n, self.out_conv_channels, self.roi_feat_size,
                               self.roi_feat_size)
        return self.upsample(x)
