"""mmdet 2.x's ``mmdet/models/utils/builder.py``: the predictor layers of the heads."""
import torch.nn as nn

__all__ = ['build_linear_layer']


def build_linear_layer(cfg, in_features, out_features):
    """mmdet's ``build_linear_layer`` for ``dict(type='Linear', **nn.Linear kwargs)``."""
    if not isinstance(cfg, dict) or cfg.get('type') != 'Linear':
        raise NotImplementedError(f"only dict(type='Linear') predictor layers are supported, "
                                  f'got {cfg!r}')
    cfg = dict(cfg)
    cfg.pop('type')
    return nn.Linear(in_features, out_features, **cfg)
