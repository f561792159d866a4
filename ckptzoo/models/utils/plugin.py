"""mmcv 1.x ``build_plugin_layer``: the layers a config may insert by ``type`` (GRoIE's
``pre_cfg`` / ``post_cfg``, ResNet's ``plugins``)."""
import difflib

from .context_block import ContextBlock
from .conv_module import ConvModule
from .generalized_attention import GeneralizedAttention
from .non_local import NonLocal2d

__all__ = ['PLUGIN_LAYERS', 'build_plugin_layer']

PLUGIN_LAYERS = {'ConvModule': ConvModule, 'NonLocal2d': NonLocal2d,
                 'GeneralizedAttention': GeneralizedAttention, 'ContextBlock': ContextBlock}


def build_plugin_layer(cfg, postfix='', **kwargs):
    """``(name, layer)`` as mmcv: the layer built from ``cfg`` (its ``type`` one of
    :data:`PLUGIN_LAYERS`) and its abbreviated name with ``postfix`` (``context_block1``, ...)."""
    if not isinstance(cfg, dict) or 'type' not in cfg:
        raise TypeError(f'a plugin layer config is a dict with a type, got {cfg!r}')
    cfg = dict(cfg)
    layer_type = cfg.pop('type')
    if layer_type not in PLUGIN_LAYERS:
        close = difflib.get_close_matches(str(layer_type), list(PLUGIN_LAYERS), n=3)
        raise KeyError(f'unknown plugin layer type {layer_type!r}; supported: '
                       f'{", ".join(PLUGIN_LAYERS)}'
                       + (f' (did you mean {close[0]}?)' if close else ''))
    name = {'ConvModule': 'conv_block', 'NonLocal2d': 'nonlocal_block',
            'GeneralizedAttention': 'gen_attention_block',
            'ContextBlock': 'context_block'}[layer_type]
    return name + str(postfix), PLUGIN_LAYERS[layer_type](**kwargs, **cfg)
