"""DetectoRS's ResNeXt (mmdet 2.x ``DetectoRS_ResNeXt``): :class:`DetectoRS_ResNet` whose
Bottlenecks are ``floor(planes * base_width / base_channels) * groups`` channels wide inside
with a ``groups``-way 3x3 conv (a SAC one in the ``stage_with_sac`` stages), as ResNeXt.
Keys, units, ``rfp_forward`` and initialisation are DetectoRS_ResNet's.

mmdet's block rebuilds its convs but not its plugins, so a plugin after conv1 / conv2 gets
``planes`` channels where the conv gives ``width`` (a crash for ``groups > 1``); here the
plugins are rebuilt for ``width``, as ResNeXt's.
"""
import math

from ...registry import MODELS
from ..utils import build_conv_layer, build_norm_layer
from .detectors_resnet import Bottleneck as _Bottleneck
from .detectors_resnet import DetectoRS_ResNet
from .resnext import check_groups

__all__ = ['Bottleneck', 'DetectoRS_ResNeXt']


class Bottleneck(_Bottleneck):
    """DetectoRS's Bottleneck with ``groups`` x ``base_width`` channels in its 3x3 conv."""

    def __init__(self, inplanes, planes, groups=1, base_width=4, base_channels=64, **kwargs):
        super().__init__(inplanes, planes, **kwargs)
        if groups == 1:
            return  # DetectoRS_ResNet's block as it is (mmdet rebuilds the same shapes)
        width = math.floor(planes * (base_width / base_channels)) * groups
        norm_cfg = kwargs.get('norm_cfg', dict(type='BN'))
        conv_cfg = self.conv_cfg
        # replaced in place: same attribute names and state-dict order as mmdet's block
        self.conv1 = build_conv_layer(conv_cfg, inplanes, width, 1, stride=self.conv1.stride,
                                      bias=False)
        self.add_module(self.norm1_name, build_norm_layer(norm_cfg, width, postfix=1)[1])
        if self.with_sac:
            self.conv2 = build_conv_layer(self.sac, width, width, 3, stride=self.conv2.stride,
                                          padding=self.dilation, dilation=self.dilation,
                                          groups=groups, bias=False)
        else:  # ``conv_cfg``'s or, in a ``stage_with_dcn`` stage, the DCN (as mmdet's)
            self.conv2 = self._make_conv2(width, self.conv2.stride[0], self.dilation, groups)
        self.add_module(self.norm2_name, build_norm_layer(norm_cfg, width, postfix=2)[1])
        self.conv3 = build_conv_layer(conv_cfg, width, planes * self.expansion, 1, bias=False)
        self.remove_all_block_plugins()
        self.make_all_block_plugins(width, width)


@MODELS.register_module()
class DetectoRS_ResNeXt(DetectoRS_ResNet):
    """ResNeXt backbone for DetectoRS.

    Args:
        groups (int): groups of each 3x3 conv (cardinality), e.g. 32.
        base_width (int): channels per group at the first stage's width, e.g. 4 (32x4d).
        **kwargs: :class:`DetectoRS_ResNet`'s.
    """

    arch_settings = {
        50: (Bottleneck, (3, 4, 6, 3)),
        101: (Bottleneck, (3, 4, 23, 3)),
        152: (Bottleneck, (3, 8, 36, 3)),
    }

    def __init__(self, groups=1, base_width=4, **kwargs):
        check_groups('DetectoRS_ResNeXt', groups, base_width)
        self.groups = groups
        self.base_width = base_width
        super().__init__(**kwargs)

    def make_res_layer(self, **kwargs):
        return super().make_res_layer(groups=self.groups, base_width=self.base_width,
                                      base_channels=self.base_channels, **kwargs)
