"""mmdet 2.x's ``LearningRateDecayOptimizerConstructor``: the lr of a ConvNeXt backbone's
parameters decays with their depth, as mmdet's ConvNeXt configs ask::

    optimizer = dict(constructor='LearningRateDecayOptimizerConstructor', type='AdamW',
                     lr=0.0002, weight_decay=0.05,
                     paramwise_cfg=dict(decay_rate=0.7, decay_type='layer_wise', num_layers=6))

Each trainable parameter gets a layer id (``layer_wise``: the stem and stage 0 are 0 and 1,
stage 1 and its downsampling 2, stage 2's blocks ``3 + j // 3``, stage 3 ``num_layers``, the
rest of the model ``num_layers + 1``; ``stage_wise``: downsampling layers 0, stage ``i``
``i + 1``, the rest ``num_layers``), and a group per (id, decay or not) with
``lr = lr * decay_rate ** (num_layers + 1 - id)``; 1-d parameters and biases get no weight
decay. The groups (their order, ``lr``, ``lr_scale``, ``weight_decay``, ``group_name``,
``param_names``) are mmdet's, so optimizer states of mmdet checkpoints line up. Fixes over mmdet:
unknown or missing ``paramwise_cfg`` keys and other ``decay_type`` values fail naming the allowed
ones (mmdet fails with an UnboundLocalError).
"""
import numbers

from ..registry import OPTIMIZER_BUILDERS
from .optimizer_constructor import DefaultOptimizerConstructor

__all__ = ['LearningRateDecayOptimizerConstructor']

DECAY_TYPES = ('layer_wise', 'stage_wise')
_KEYS = ('num_layers', 'decay_rate', 'decay_type')


def _layer_id(name, max_layer_id):
    if name in ('backbone.cls_token', 'backbone.mask_token', 'backbone.pos_embed'):
        return 0
    parts = name.split('.')
    if name.startswith('backbone.downsample_layers'):
        return {0: 0, 1: 2, 2: 3}.get(int(parts[2]), max_layer_id)
    if name.startswith('backbone.stages'):
        stage, block = int(parts[2]), int(parts[3])
        return {0: 1, 1: 2, 2: 3 + block // 3}.get(stage, max_layer_id)
    return max_layer_id + 1


def _stage_id(name, max_stage_id):
    if name in ('backbone.cls_token', 'backbone.mask_token', 'backbone.pos_embed') \
            or name.startswith('backbone.downsample_layers'):
        return 0
    if name.startswith('backbone.stages'):
        return int(name.split('.')[2]) + 1
    return max_stage_id - 1


@OPTIMIZER_BUILDERS.register_module()
class LearningRateDecayOptimizerConstructor(DefaultOptimizerConstructor):
    """Layer-wise / stage-wise lr decay over a model whose ``backbone`` is a ConvNeXt.

    Args:
        optimizer_cfg (dict): ``type``, ``lr``, ``weight_decay`` and the optimizer's arguments.
        paramwise_cfg (dict): ``num_layers`` (int), ``decay_rate`` (float), ``decay_type``
            (``'layer_wise'``, the default, or ``'stage_wise'``).
    """

    def _validate(self):
        cfg = self.paramwise_cfg
        unknown = sorted(set(cfg) - set(_KEYS))
        if unknown:
            raise KeyError(f'unknown paramwise_cfg key(s) {", ".join(map(repr, unknown))} for '
                           f'LearningRateDecayOptimizerConstructor: allowed are '
                           f'{", ".join(_KEYS)}')
        num_layers = cfg.get('num_layers')
        if isinstance(num_layers, bool) or not isinstance(num_layers, int) or num_layers < 1:
            raise ValueError(f'paramwise_cfg num_layers must be a positive int, got '
                             f'{num_layers!r}')
        rate = cfg.get('decay_rate')
        if isinstance(rate, bool) or not isinstance(rate, numbers.Real):
            raise ValueError(f'paramwise_cfg decay_rate must be a number, got {rate!r}')
        if cfg.get('decay_type', 'layer_wise') not in DECAY_TYPES:
            raise ValueError(f'paramwise_cfg decay_type must be one of {", ".join(DECAY_TYPES)}, '
                             f'got {cfg["decay_type"]!r}')
        if self.base_lr is None or self.base_wd is None:
            raise ValueError(f'LearningRateDecayOptimizerConstructor needs the optimizer config '
                             f'to give lr and weight_decay, got keys {sorted(self.optimizer_cfg)}')

    def add_params(self, params, module, **kwargs):
        """Append mmdet's groups of ``module``'s trainable parameters to ``params``."""
        backbone = getattr(module, 'backbone', None)
        if 'ConvNeXt' not in type(backbone).__name__:
            raise NotImplementedError(f'LearningRateDecayOptimizerConstructor decays the layers '
                                      f'of a ConvNeXt backbone (as mmdet 2.x), got '
                                      f'{type(backbone).__name__}')
        cfg = self.paramwise_cfg
        num_layers = cfg['num_layers'] + 2
        layer_wise = cfg.get('decay_type', 'layer_wise') == 'layer_wise'
        groups = {}
        for name, param in module.named_parameters():
            if not param.requires_grad:
                continue
            no_decay = param.ndim == 1 or name.endswith('.bias') or \
                name in ('pos_embed', 'cls_token')
            layer_id = _layer_id(name, cfg['num_layers']) if layer_wise \
                else _stage_id(name, num_layers)
            group_name = f'layer_{layer_id}_{"no_decay" if no_decay else "decay"}'
            if group_name not in groups:
                scale = cfg['decay_rate']**(num_layers - layer_id - 1)
                groups[group_name] = dict(weight_decay=0. if no_decay else self.base_wd,
                                          params=[], param_names=[], lr_scale=scale,
                                          group_name=group_name, lr=scale * self.base_lr)
            groups[group_name]['params'].append(param)
            groups[group_name]['param_names'].append(name)
        params.extend(groups.values())
