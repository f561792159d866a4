"""mmdet 2.x's ``mmdet/models/utils/builder.py`` (``build_linear_layer``) and the predictor
convolution mmcv's ``build_conv_layer`` makes for the heads: the layer types by name.

``LINEAR_LAYERS``: ``Linear`` (``nn.Linear``) and ``NormedLinear``; ``CONV_LAYERS``: ``Conv``,
``Conv2d`` (``nn.Conv2d``) and ``NormedConv2d`` (``normed_predictor.py`` adds the normed ones),
``DCN`` / ``DCNv2`` (:mod:`ckptzoo.ops.deform_conv`'s packs, registered under mmcv's names).
"""
import torch.nn as nn

from ...ops.deform_conv import DeformConv2dPack, ModulatedDeformConv2dPack

__all__ = ['LINEAR_LAYERS', 'CONV_LAYERS', 'build_linear_layer', 'build_conv_layer']

LINEAR_LAYERS = {'Linear': nn.Linear}
CONV_LAYERS = {'Conv': nn.Conv2d, 'Conv2d': nn.Conv2d}
CONV_LAYERS['DCN'] = DeformConv2dPack  # mmcv registers its packs under these names
CONV_LAYERS['DCNv2'] = ModulatedDeformConv2dPack


def _build(kind, registry, cfg, default, args, kwargs):
    if cfg is None:
        cfg = dict(type=default)
    if not isinstance(cfg, dict) or 'type' not in cfg:
        raise TypeError(f'a {kind} layer config must be a dict with a "type" key, got {cfg!r}')
    cfg = dict(cfg)
    layer_type = cfg.pop('type')
    if layer_type not in registry:
        raise NotImplementedError(f'{kind} layer type {layer_type!r} is not supported: allowed '
                                  f'are {", ".join(registry)}')
    return registry[layer_type](*args, **kwargs, **cfg)


def build_linear_layer(cfg, *args, **kwargs):
    """mmdet's ``build_linear_layer``: ``cfg`` (None: ``dict(type='Linear')``) names a type
    of :data:`LINEAR_LAYERS`; its other keys and ``args`` / ``kwargs`` go to the layer."""
    return _build('linear', LINEAR_LAYERS, cfg, 'Linear', args, kwargs)


def build_conv_layer(cfg, *args, **kwargs):
    """mmcv's ``build_conv_layer`` for the 2d convolutions of :data:`CONV_LAYERS` (None:
    ``nn.Conv2d``)."""
    return _build('conv', CONV_LAYERS, cfg, 'Conv2d', args, kwargs)

# mmcv's ConvTranspose2d wrapper is a conv layer too, by both names (CenterNet's neck, FPN_CARAFE)
CONV_LAYERS.update(deconv=nn.ConvTranspose2d, ConvTranspose2d=nn.ConvTranspose2d)
