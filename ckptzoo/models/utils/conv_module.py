"""mmcv's ``ConvModule``: conv, norm, activation with mmcv's attribute names.

The names (``conv``, ``bn`` / ``gn``, ``activate``) make state-dict keys such as
``neck.lateral_convs.0.conv.weight`` equal to mmdet 2.x checkpoints'.
"""
import torch.nn as nn

from .builder import CONV_LAYERS
from .conv_ws import ConvWS2d  # noqa: F401  (registers 'ConvWS')
from .norm import build_norm_layer
from .weight_init import constant_init, kaiming_init

__all__ = ['ConvModule', 'build_activation_layer', 'ACTIVATIONS']

ACTIVATIONS = {
    'ReLU': nn.ReLU, 'LeakyReLU': nn.LeakyReLU, 'ReLU6': nn.ReLU6, 'ELU': nn.ELU,
    'PReLU': nn.PReLU, 'Sigmoid': nn.Sigmoid, 'Tanh': nn.Tanh, 'GELU': nn.GELU,
    'SiLU': nn.SiLU, 'Swish': nn.SiLU,
}
_INPLACE = ('ReLU', 'LeakyReLU', 'ReLU6', 'ELU', 'SiLU')


def build_activation_layer(cfg):
    if not isinstance(cfg, dict) or cfg.get('type') not in ACTIVATIONS:
        raise ValueError(f'act_cfg must be a dict with type one of {", ".join(ACTIVATIONS)}, '
                         f'got {cfg!r}')
    cfg = dict(cfg)
    return ACTIVATIONS[cfg.pop('type')](**cfg)


class ConvModule(nn.Module):
    """A conv followed (by default) by a norm and an activation, as mmcv 1.x.

    Args:
        bias (bool | 'auto'): 'auto' gives the conv a bias only when there is no norm.
        conv_cfg (None | dict): None (``nn.Conv2d``), ``dict(type='Conv1d')`` or a type of
            :data:`~ckptzoo.models.utils.builder.CONV_LAYERS` with its arguments
            (``dict(type='ConvWS')``, ``eps`` optional).
        norm_cfg (dict | None): e.g. ``dict(type='BN')`` or ``dict(type='GN', num_groups=32)``.
        act_cfg (dict | None): e.g. ``dict(type='ReLU')``; None for no activation.
        inplace (bool): in-place activation (ReLU and friends).
        order (tuple): a permutation of ('conv', 'norm', 'act').
    """

    _abbr_ = 'conv_block'

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1,
                 groups=1, bias='auto', conv_cfg=None, norm_cfg=None, act_cfg=dict(type='ReLU'),
                 inplace=True, with_spectral_norm=False, padding_mode='zeros',
                 order=('conv', 'norm', 'act')):
        super().__init__()
        conv_layers = dict(CONV_LAYERS, Conv1d=nn.Conv1d)  # Conv1d: PointRend's MaskPointHead
        conv_args = dict(conv_cfg or dict(type='Conv2d'))
        conv_type = conv_args.pop('type', None)
        if conv_type not in conv_layers:
            raise NotImplementedError(f"ConvModule supports conv_cfg=None (nn.Conv2d) or a type "
                                      f"of {', '.join(conv_layers)}, got {conv_cfg!r}")
        if with_spectral_norm:
            raise NotImplementedError('ConvModule with_spectral_norm is not supported')
        if not (isinstance(order, (tuple, list)) and len(order) == 3
                and set(order) == {'conv', 'norm', 'act'}):
            raise ValueError(f"order must be a permutation of ('conv', 'norm', 'act'), "
                             f'got {order!r}')
        if bias != 'auto' and not isinstance(bias, bool):
            raise ValueError(f"bias must be a bool or 'auto', got {bias!r}")
        self.conv_cfg = conv_cfg
        self.norm_cfg = norm_cfg
        self.act_cfg = act_cfg
        self.inplace = inplace
        self.order = tuple(order)
        self.with_norm = norm_cfg is not None
        self.with_activation = act_cfg is not None
        if bias == 'auto':
            bias = not self.with_norm
        self.with_bias = bias

        if padding_mode != 'zeros':
            conv_args['padding_mode'] = padding_mode
        self.conv = conv_layers[conv_type](in_channels, out_channels, kernel_size, stride=stride,
                                           padding=padding, dilation=dilation, groups=groups,
                                           bias=bias, **conv_args)
        self.in_channels = in_channels
        self.out_channels = out_channels
        if self.with_norm:
            norm_channels = out_channels if self.order.index('norm') > self.order.index('conv') \
                else in_channels
            self.norm_name, norm = build_norm_layer(norm_cfg, norm_channels)
            self.add_module(self.norm_name, norm)
        else:
            self.norm_name = None
        if self.with_activation:
            act_cfg = dict(act_cfg)
            if act_cfg.get('type') in _INPLACE:
                act_cfg.setdefault('inplace', inplace)
            self.activate = build_activation_layer(act_cfg)
        self.init_weights()

    @property
    def norm(self):
        return getattr(self, self.norm_name) if self.norm_name else None

    def init_weights(self):
        """mmcv's default: kaiming (fan_out) conv, unless the conv has its own
        ``init_weights`` (e.g. ``DCNv2``: mmcv leaves it to it), unit norm."""
        if self.with_activation and self.act_cfg['type'] == 'LeakyReLU':
            nonlinearity, a = 'leaky_relu', self.act_cfg.get('negative_slope', 0.01)
        else:
            nonlinearity, a = 'relu', 0
        if not hasattr(self.conv, 'init_weights'):
            kaiming_init(self.conv, a=a, nonlinearity=nonlinearity)
        if self.with_norm:
            constant_init(self.norm, 1, bias=0)

    def forward(self, x, activate=True, norm=True):
        for layer in self.order:
            if layer == 'conv':
                x = self.conv(x)
            elif layer == 'norm' and norm and self.with_norm:
                x = self.norm(x)
            elif layer == 'act' and activate and self.with_activation:
                x = self.activate(x)
        return x
