"""ResNeXt (mmdet 2.x arguments, torchvision state-dict keys): ResNet with grouped 3x3 convs.

Only the blocks differ from :class:`ResNet`: each Bottleneck is ``width = floor(planes *
base_width / base_channels) * groups`` channels wide inside (``planes`` when ``groups == 1``)
with a ``groups``-way 3x3 conv, as in mmdet and torchvision. Stem, stages, freezing, ``norm_eval``
and ``with_cp`` (exact, stem included) are ResNet's. Keys are ``conv1 bn1 layer1.0.conv2 ...
layer1.0.downsample.0``, so torchvision's ``resnext50_32x4d`` / ``resnext101_32x8d`` /
``resnext101_64x4d`` state dicts and mmdet's ``open-mmlab://resnext101_32x4d`` load strictly::

    backbone=dict(type='ResNeXt', depth=101, groups=32, base_width=4, frozen_stages=1,
                  init_cfg=dict(type='Pretrained', checkpoint='open-mmlab://resnext101_32x4d'))
"""
import math
import numbers


from ...registry import MODELS
from ..utils import build_conv_layer, build_norm_layer
from .resnet import Bottleneck as _Bottleneck
from ..utils import ResLayer
from .resnet import ResNet

__all__ = ['ResNeXt', 'Bottleneck']


class Bottleneck(_Bottleneck):
    """ResNet's Bottleneck with ``groups`` x ``base_width`` channels in its 3x3 conv (a
    ``groups``-way deformable conv with ``dcn``, as mmdet)."""

    def __init__(self, inplanes, planes, *args, groups=1, base_width=4, base_channels=64,
                 **kwargs):
        super().__init__(inplanes, planes, *args, **kwargs)
        if groups == 1:
            return  # ResNet's block as it is (mmdet rebuilds the same shapes)
        width = math.floor(planes * (base_width / base_channels)) * groups
        norm_cfg = kwargs.get('norm_cfg', dict(type='BN'))
        conv_cfg = self.conv_cfg
        # replaced in place: same attribute names and state-dict order as ResNet's block
        self.conv1 = build_conv_layer(conv_cfg, inplanes, width, 1, stride=self.conv1.stride,
                                      bias=False)
        self.add_module(self.norm1_name, build_norm_layer(norm_cfg, width, postfix=1)[1])
        self.conv2 = self._make_conv2(width, self.conv2_stride, self.dilation, groups)
        self.add_module(self.norm2_name, build_norm_layer(norm_cfg, width, postfix=2)[1])
        self.conv3 = build_conv_layer(conv_cfg, width, planes * self.expansion, 1, bias=False)
        # the plugins after conv1 / conv2 see ``width`` channels: rebuilt (mmdet's order)
        self.remove_all_block_plugins()
        self.make_all_block_plugins(width, width)


def check_groups(owner, groups, base_width):
    """ResNeXt's ``groups`` and ``base_width``: positive ints, else an error naming them."""
    for name, value in (('groups', groups), ('base_width', base_width)):
        if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
            raise ValueError(f'{owner} {name} must be a positive int, got {value!r}')


@MODELS.register_module()
class ResNeXt(ResNet):
    """ResNeXt backbone, mmdet 2.x arguments.

    Args:
        groups (int): groups of each 3x3 conv (cardinality), e.g. 32.
        base_width (int): channels per group at the first stage's width, e.g. 4 (32x4d).
        **kwargs: :class:`ResNet`'s (``depth`` 50, 101 or 152).
    """

    arch_settings = {
        50: (Bottleneck, (3, 4, 6, 3)),
        101: (Bottleneck, (3, 4, 23, 3)),
        152: (Bottleneck, (3, 8, 36, 3)),
    }

    def __init__(self, groups=1, base_width=4, **kwargs):
        check_groups('ResNeXt', groups, base_width)
        self.groups = groups
        self.base_width = base_width
        super().__init__(**kwargs)

    def make_res_layer(self, **kwargs):
        return ResLayer(groups=self.groups, base_width=self.base_width,
                        base_channels=self.base_channels, **kwargs)
