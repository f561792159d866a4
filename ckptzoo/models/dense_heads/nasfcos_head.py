"""mmdet 2.x ``NASFCOSHead`` (Wang et al. 2020): an FCOS head whose two towers are the searched
"dconv3x3, conv3x3, dconv3x3, conv1x1" (the dconvs modulated deformable convs, ``DCNv2``
with 2 deformable groups and a bias) instead of ``stacked_convs`` 3x3 convs. Targets, losses
and decoding are FCOS's; state-dict keys equal mmdet's. Checkpoint units: ``level{i}``."""
import torch.nn as nn

from ...registry import MODELS
from ..utils import ConvModule
from .fcos_head import FCOSHead

__all__ = ['NASFCOSHead']

# (conv_cfg, kernel size, padding, bias) of each tower layer, as searched
_ARCH = ((dict(type='DCNv2', deform_groups=2), 3, 1, True), (dict(type='Conv'), 3, 1, False),
         (dict(type='DCNv2', deform_groups=2), 3, 1, True), (dict(type='Conv'), 1, 0, False))


@MODELS.register_module()
class NASFCOSHead(FCOSHead):
    """Args: as :class:`FCOSHead` (``stacked_convs`` and ``dcn_on_last_conv`` have no effect:
    the towers are fixed). ``init_cfg`` None (the default) is mmdet's: Caffe2Xavier on the
    convs, then Normal(0.01) on ``conv_reg`` / ``conv_centerness`` and the focal-loss prior
    on ``conv_cls``."""

    def __init__(self, *args, init_cfg=None, **kwargs):
        if init_cfg is None:
            init_cfg = [
                dict(type='Caffe2Xavier', layer=['ConvModule', 'Conv2d']),
                dict(type='Normal', std=0.01,
                     override=[dict(name='conv_reg'), dict(name='conv_centerness'),
                               dict(name='conv_cls', type='Normal', std=0.01,
                                    bias_prob=0.01)])]
        super().__init__(*args, init_cfg=init_cfg, **kwargs)

    def _tower(self):
        return nn.ModuleList(
            ConvModule(self.in_channels if i == 0 else self.feat_channels, self.feat_channels,
                       kernel, stride=1, padding=padding, norm_cfg=self.norm_cfg, bias=bias,
                       conv_cfg=conv_cfg)
            for i, (conv_cfg, kernel, padding, bias) in enumerate(_ARCH))
