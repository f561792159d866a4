"""mmcv's ``build_norm_layer``: ``norm_cfg = dict(type='BN', requires_grad=True)`` to a layer.

The returned name (``bn1``, ``gn1``, ...) is the attribute name mmcv/mmdet give the layer, which
keeps state-dict keys equal to theirs (and, for BN, to torchvision's).
"""
import torch.nn as nn

# type -> (layer class, name prefix)
NORM_LAYERS = {
    'BN': (nn.BatchNorm2d, 'bn'),
    'BN1d': (nn.BatchNorm1d, 'bn'),
    'BN2d': (nn.BatchNorm2d, 'bn'),
    'BN3d': (nn.BatchNorm3d, 'bn'),
    'SyncBN': (nn.SyncBatchNorm, 'bn'),
    'GN': (nn.GroupNorm, 'gn'),
    'LN': (nn.LayerNorm, 'ln'),
    'IN': (nn.InstanceNorm2d, 'in'),
}


def build_norm_layer(cfg, num_features, postfix=''):
    """Returns ``(name, layer)``; ``cfg`` as in mmcv: type, requires_grad, eps, momentum, num_groups."""
    if not isinstance(cfg, dict) or 'type' not in cfg:
        raise TypeError(f'norm_cfg must be a dict with a "type" key, got {cfg!r}')
    cfg = dict(cfg)
    norm_type = cfg.pop('type')
    if norm_type not in NORM_LAYERS:
        raise ValueError(f'unknown norm type {norm_type!r}: allowed are {", ".join(NORM_LAYERS)}')
    layer_cls, prefix = NORM_LAYERS[norm_type]
    requires_grad = cfg.pop('requires_grad', True)
    cfg.setdefault('eps', 1e-5)
    if norm_type == 'GN':
        if 'num_groups' not in cfg:
            raise ValueError(f'norm_cfg of type GN needs num_groups, got {cfg!r}')
        layer = layer_cls(num_channels=num_features, **cfg)
    elif norm_type == 'LN':
        layer = layer_cls(num_features, **cfg)
    else:
        layer = layer_cls(num_features, **cfg)
        if norm_type == 'SyncBN' and hasattr(layer, '_specify_ddp_gpu_num'):
            layer._specify_ddp_gpu_num(1)
    for param in layer.parameters():
        param.requires_grad = requires_grad
    return f'{prefix}{postfix}', layer
