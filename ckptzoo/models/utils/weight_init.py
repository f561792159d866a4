"""mmcv's weight initialisers and the ``init_cfg`` dicts that name them.

mmdet 2.x heads and necks describe their initialisation as data, e.g. RetinaHead's
``dict(type='Normal', layer='Conv2d', std=0.01, override=dict(type='Normal', name='retina_cls',
std=0.01, bias_prob=0.01))``. :func:`apply_init_cfg` reads that dict so configs keep working;
the supported types are Normal, Xavier, Kaiming, Constant, Uniform, TruncNormal and
Caffe2Xavier.
"""
import math
from functools import partial

import torch.nn as nn

__all__ = ['bias_init_with_prob', 'normal_init', 'xavier_init', 'kaiming_init', 'constant_init',
           'uniform_init', 'trunc_normal_init', 'apply_init_cfg']


def bias_init_with_prob(prior_prob):
    """The bias whose sigmoid is ``prior_prob`` (RetinaNet's rare-foreground prior)."""
    if not 0 < prior_prob < 1:
        raise ValueError(f'prior_prob must be in (0, 1), got {prior_prob!r}')
    return float(-math.log((1 - prior_prob) / prior_prob))


def _init_bias(module, bias):
    if getattr(module, 'bias', None) is not None:
        nn.init.constant_(module.bias, bias)


def constant_init(module, val, bias=0):
    if getattr(module, 'weight', None) is not None:
        nn.init.constant_(module.weight, val)
    _init_bias(module, bias)


def normal_init(module, mean=0, std=1, bias=0):
    if getattr(module, 'weight', None) is not None:
        nn.init.normal_(module.weight, mean, std)
    _init_bias(module, bias)


def uniform_init(module, a=0, b=1, bias=0):
    if getattr(module, 'weight', None) is not None:
        nn.init.uniform_(module.weight, a, b)
    _init_bias(module, bias)


def trunc_normal_init(module, mean=0, std=1, a=-2, b=2, bias=0):
    """mmcv's: a normal(mean, std) truncated to [a, b] (SSDLite's convs)."""
    if getattr(module, 'weight', None) is not None:
        nn.init.trunc_normal_(module.weight, mean, std, a, b)
    _init_bias(module, bias)


def xavier_init(module, gain=1, bias=0, distribution='normal'):
    if distribution not in ('uniform', 'normal'):
        raise ValueError(f"distribution must be 'uniform' or 'normal', got {distribution!r}")
    if getattr(module, 'weight', None) is not None:
        if distribution == 'uniform':
            nn.init.xavier_uniform_(module.weight, gain=gain)
        else:
            nn.init.xavier_normal_(module.weight, gain=gain)
    _init_bias(module, bias)


def kaiming_init(module, a=0, mode='fan_out', nonlinearity='relu', bias=0,
                 distribution='normal'):
    if distribution not in ('uniform', 'normal'):
        raise ValueError(f"distribution must be 'uniform' or 'normal', got {distribution!r}")
    if getattr(module, 'weight', None) is not None:
        init = nn.init.kaiming_uniform_ if distribution == 'uniform' else nn.init.kaiming_normal_
        init(module.weight, a=a, mode=mode, nonlinearity=nonlinearity)
    _init_bias(module, bias)


_INITS = {
    'Normal': (normal_init, ('mean', 'std')),
    'Xavier': (xavier_init, ('gain', 'distribution')),
    'Kaiming': (kaiming_init, ('a', 'mode', 'nonlinearity', 'distribution')),
    'Constant': (constant_init, ('val', )),
    'Uniform': (uniform_init, ('a', 'b')),
    'TruncNormal': (trunc_normal_init, ('mean', 'std', 'a', 'b')),
    # mmcv's Caffe2XavierInit: Kaiming uniform, a=1, fan_in, leaky_relu
    'Caffe2Xavier': (partial(kaiming_init, a=1, mode='fan_in', nonlinearity='leaky_relu',
                             distribution='uniform'), ()),
}


def _initializer(cfg):
    cfg = dict(cfg)
    init_type = cfg.pop('type', None)
    if init_type not in _INITS:
        raise ValueError(f'init_cfg type must be one of {", ".join(_INITS)}, got {init_type!r}')
    func, names = _INITS[init_type]
    bias_prob = cfg.pop('bias_prob', None)
    kwargs = {k: cfg.pop(k) for k in names if k in cfg}
    kwargs['bias'] = cfg.pop('bias', 0) if bias_prob is None else bias_init_with_prob(bias_prob)
    return func, kwargs, cfg


def apply_init_cfg(module, init_cfg, _whole=False):
    """Initialise ``module`` from an mmcv ``init_cfg`` (a dict or a list of them).

    ``layer`` names the layer classes to initialise (e.g. 'Conv2d'); ``override`` re-initialises
    named children afterwards, each as a whole (every layer with a weight inside it, e.g. all
    Linears of a ModuleList), as mmcv does. ``Pretrained`` is left to ``init_weights``.
    """
    if init_cfg is None:
        return
    for cfg in (init_cfg if isinstance(init_cfg, (list, tuple)) else [init_cfg]):
        if not isinstance(cfg, dict):
            raise TypeError(f'init_cfg must be a dict or a list of dicts, got {cfg!r}')
        if cfg.get('type') == 'Pretrained':
            continue
        func, kwargs, rest = _initializer(cfg)
        layers = rest.pop('layer', None)
        overrides = rest.pop('override', None)
        if rest:
            raise ValueError(f'unknown init_cfg keys {sorted(rest)} in {cfg!r}')
        if layers is not None:
            layers = {layers} if isinstance(layers, str) else set(layers)
            for m in module.modules():
                if type(m).__name__ in layers:
                    func(m, **kwargs)
        elif overrides is None:
            for m in (module.modules() if _whole else [module]):
                func(m, **kwargs)
        for override in (overrides if isinstance(overrides, (list, tuple)) else
                         [overrides] if overrides else []):
            override = dict(override)
            name = override.pop('name', None)
            if name is None or not hasattr(module, name):
                raise ValueError(f'init_cfg override needs the name of a child of '
                                 f'{type(module).__name__}, got {name!r}')
            if 'type' not in override:  # mmcv: an override without a type reuses the parent's
                override = dict(cfg, **override)
                override.pop('layer', None)
                override.pop('override', None)
            apply_init_cfg(getattr(module, name), override, _whole=True)
