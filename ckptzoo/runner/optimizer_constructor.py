"""``optimizer.paramwise_cfg``: per-parameter lr and weight decay, as mmcv 1.x built them.

mmdet 2.x's Swin and ConvNeXt configs zero the weight decay of position embeddings and norms:

    optimizer = dict(type='AdamW', lr=1e-4, weight_decay=0.05, paramwise_cfg=dict(
        custom_keys={'absolute_pos_embed': dict(decay_mult=0.),
                     'relative_position_bias_table': dict(decay_mult=0.),
                     'norm': dict(decay_mult=0.)}))

:class:`DefaultOptimizerConstructor` gives every parameter the group mmcv 1.7's constructor of
the same name gives it (one group per parameter, in module order, frozen ones included with the
defaults), so lr schedules, checkpoints and logs index the same groups. Rules, per parameter
``<module path>.<name>``:

- ``custom_keys``: the longest key that is a substring of the name (ties: alphabetical) sets
  ``lr = lr * lr_mult`` and ``weight_decay = weight_decay * decay_mult``; no other rule applies.
  At the model's top level the name is ``.<name>``, as in mmcv.
- otherwise ``bias_lr_mult`` scales the lr of biases outside norm layers and deformable convs;
  ``dcn_offset_lr_mult`` sets the lr of a deformable conv's ``conv_offset`` convolution;
  ``norm_decay_mult`` scales the decay of BatchNorm/InstanceNorm/GroupNorm/LayerNorm
  parameters, else ``dwconv_decay_mult`` that of depthwise convs, else ``bias_decay_mult``
  that of biases (outside deformable convs).
- ``bypass_duplicate``: a parameter shared by several modules is added once (with a warning).

Fixes over mmcv: unknown keys (of ``paramwise_cfg`` or of a custom key) fail naming the allowed
ones instead of being ignored; ``bypass_duplicate`` also skips shared *frozen* parameters (mmcv
added them twice and torch refused the optimizer); without it, a shared parameter fails naming
the parameter and the option; a missing ``lr`` fails with a message instead of a TypeError.
"""
import numbers
import warnings

import torch
import torch.nn as nn

from ..registry import OPTIMIZER_BUILDERS, OPTIMIZERS
from .utils import unwrap_model

__all__ = ['DefaultOptimizerConstructor', 'PARAMWISE_KEYS', 'CUSTOM_KEY_FIELDS']

PARAMWISE_KEYS = ('custom_keys', 'bias_lr_mult', 'bias_decay_mult', 'norm_decay_mult',
                  'dwconv_decay_mult', 'dcn_offset_lr_mult', 'bypass_duplicate')
CUSTOM_KEY_FIELDS = ('lr_mult', 'decay_mult')
_DECAY_KEYS = ('bias_decay_mult', 'norm_decay_mult', 'dwconv_decay_mult')
_NORM_TYPES = (nn.modules.batchnorm._BatchNorm, nn.modules.instancenorm._InstanceNorm,
               nn.GroupNorm, nn.LayerNorm)
_DCN_NAMES = ('DeformConv2d', 'ModulatedDeformConv2d')


def _is_dcn(module):
    # mmcv's (and torchvision's) deformable convs, by class name: no compiled ops needed
    return any(cls.__name__ in _DCN_NAMES for cls in type(module).__mro__)


def _check_mult(value, name):
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f'paramwise_cfg {name} must be a number, got {value!r}')
    return float(value)


@OPTIMIZER_BUILDERS.register_module()
class DefaultOptimizerConstructor:
    """Builds ``optimizer_cfg``'s optimizer over a model, with ``paramwise_cfg``'s groups.

    Args:
        optimizer_cfg (dict): ``type`` (an ``OPTIMIZERS`` name) and the optimizer's arguments.
        paramwise_cfg (dict | None): the rules above; None or empty gives one group of the
            model's trainable parameters.
    """

    def __init__(self, optimizer_cfg, paramwise_cfg=None):
        if not isinstance(optimizer_cfg, dict):
            raise TypeError(f'optimizer_cfg must be a dict, got {optimizer_cfg!r}')
        if paramwise_cfg is not None and not isinstance(paramwise_cfg, dict):
            raise TypeError(f'paramwise_cfg must be None or a dict, got {paramwise_cfg!r}')
        self.optimizer_cfg = dict(optimizer_cfg)
        self.paramwise_cfg = dict(paramwise_cfg or {})
        self.base_lr = self.optimizer_cfg.get('lr')
        self.base_wd = self.optimizer_cfg.get('weight_decay')
        self._validate()

    def _validate(self):
        cfg = self.paramwise_cfg
        unknown = sorted(set(cfg) - set(PARAMWISE_KEYS))
        if unknown:
            raise KeyError(f'unknown paramwise_cfg key(s) {", ".join(map(repr, unknown))}: '
                           f'allowed are {", ".join(PARAMWISE_KEYS)}')
        custom_keys = cfg.get('custom_keys', {})
        if not isinstance(custom_keys, dict):
            raise TypeError(f'paramwise_cfg custom_keys must be a dict of key -> '
                            f'dict(lr_mult=..., decay_mult=...), got {custom_keys!r}')
        for key, rule in custom_keys.items():
            if not isinstance(key, str) or not isinstance(rule, dict):
                raise TypeError(f'paramwise_cfg custom_keys must map str -> dict, got '
                                f'{key!r}: {rule!r}')
            bad = sorted(set(rule) - set(CUSTOM_KEY_FIELDS))
            if bad:
                raise KeyError(f'unknown field(s) {", ".join(map(repr, bad))} in paramwise_cfg '
                               f'custom_keys[{key!r}]: allowed are {", ".join(CUSTOM_KEY_FIELDS)}')
            for field, value in rule.items():
                _check_mult(value, f'custom_keys[{key!r}].{field}')
            if 'decay_mult' in rule and self.base_wd is None:
                raise ValueError(f'paramwise_cfg custom_keys[{key!r}] sets decay_mult but the '
                                 f'optimizer config has no weight_decay')
        for name in ('bias_lr_mult', 'dcn_offset_lr_mult') + _DECAY_KEYS:
            if name in cfg:
                _check_mult(cfg[name], name)
        decay = [name for name in _DECAY_KEYS if name in cfg]
        if decay and self.base_wd is None:
            raise ValueError(f'paramwise_cfg sets {", ".join(decay)} but the optimizer config '
                             f'has no weight_decay')
        if cfg and self.base_lr is None:
            raise ValueError(f'paramwise_cfg needs the optimizer config to give lr, got keys '
                             f'{sorted(self.optimizer_cfg)}')

    # -- the groups -------------------------------------------------------------------------
    def add_params(self, params, module, prefix='', is_dcn_module=False, seen=None):
        """Append one group per parameter of ``module`` and its children to ``params``.

        ``is_dcn_module``: ``module``'s parent is a deformable conv (its ``conv_offset``).
        """
        cfg = self.paramwise_cfg
        seen = set() if seen is None else seen
        custom_keys = cfg.get('custom_keys', {})
        sorted_keys = sorted(sorted(custom_keys), key=len, reverse=True)
        bypass_duplicate = cfg.get('bypass_duplicate', False)
        is_norm = isinstance(module, _NORM_TYPES)
        is_dwconv = isinstance(module, nn.Conv2d) and module.in_channels == module.groups
        for name, param in module.named_parameters(recurse=False):
            full_name = f'{prefix}.{name}'
            if id(param) in seen:
                if not bypass_duplicate:
                    raise ValueError(f'parameter {full_name.lstrip(".")} is shared with another '
                                     f'module: set paramwise_cfg bypass_duplicate=True to add '
                                     f'it once')
                warnings.warn(f'{prefix} is duplicate. It is skipped since '
                              f'bypass_duplicate=True')
                continue
            seen.add(id(param))
            group = {'params': [param]}
            if param.requires_grad:
                group.update(self._rule(name, full_name, sorted_keys, is_norm, is_dwconv,
                                        is_dcn_module, module, prefix))
            params.append(group)
        child_is_dcn = _is_dcn(module)
        for child_name, child in module.named_children():
            child_prefix = f'{prefix}.{child_name}' if prefix else child_name
            self.add_params(params, child, child_prefix, child_is_dcn, seen)

    def _rule(self, name, full_name, sorted_keys, is_norm, is_dwconv, is_dcn_module, module,
              prefix):
        cfg = self.paramwise_cfg
        lr, wd = self.base_lr, self.base_wd
        out = {}
        for key in sorted_keys:
            if key in full_name:
                rule = cfg['custom_keys'][key]
                out['lr'] = lr * rule.get('lr_mult', 1.)
                if wd is not None:
                    out['weight_decay'] = wd * rule.get('decay_mult', 1.)
                return out
        if name == 'bias' and not (is_norm or is_dcn_module):
            out['lr'] = lr * cfg.get('bias_lr_mult', 1.)
        if 'conv_offset' in prefix and is_dcn_module and isinstance(module, nn.Conv2d):
            out['lr'] = lr * cfg.get('dcn_offset_lr_mult', 1.)
        if wd is not None:
            if is_norm:
                out['weight_decay'] = wd * cfg.get('norm_decay_mult', 1.)
            elif is_dwconv:
                out['weight_decay'] = wd * cfg.get('dwconv_decay_mult', 1.)
            elif name == 'bias' and not is_dcn_module:
                out['weight_decay'] = wd * cfg.get('bias_decay_mult', 1.)
        return out

    def __call__(self, model):
        model = unwrap_model(model)
        if not isinstance(model, torch.nn.Module):
            raise TypeError(f'model must be an nn.Module, got {type(model).__name__}')
        cfg = dict(self.optimizer_cfg)
        if not self.paramwise_cfg:
            # frozen parameters are left out: they would only waste optimizer state
            params = [p for p in model.parameters() if p.requires_grad]
        else:
            params = []
            self.add_params(params, model)
        return OPTIMIZERS.build(cfg, default_args=dict(params=params))
