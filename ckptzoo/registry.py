"""The registries that turn config dicts into objects.

Type names are those of mmcv 1.x / mmdet 2.x so their configs run unchanged. mmdet 2.x had one
registry per model part (BACKBONES, NECKS, ...); here they are aliases of one MODELS registry,
so a config may name any model part anywhere. Building an unknown ``type`` fails with an error
that names the type, the registry and the closest registered names (mmengine only says
"not in the registry").
"""
import difflib
import inspect

import torch
from mmengine.registry import Registry, build_from_cfg


class UnknownTypeError(KeyError):
    """Raised for a ``type`` no registry entry has; ``str()`` is the plain message."""

    def __str__(self):
        return self.args[0] if self.args else ''


def _check_cfg(cfg, registry):
    if not isinstance(cfg, dict):
        raise TypeError(f'a {registry.name} config must be a dict with a "type" key, '
                        f'got {type(cfg).__name__}: {cfg!r}')
    if 'type' not in cfg:
        raise KeyError(f'a {registry.name} config needs a "type" key, got keys {sorted(cfg)}')
    obj_type = cfg['type']
    if isinstance(obj_type, str) and registry.get(obj_type) is None:
        names = sorted(registry.module_dict)
        close = difflib.get_close_matches(obj_type, names, n=5, cutoff=0.5)
        hint = (f'did you mean {", ".join(close)}?' if close else
                f'registered: {", ".join(names)}')
        raise UnknownTypeError(f'unknown {registry.name} type {obj_type!r}: {hint}')
    if not (isinstance(obj_type, str) or inspect.isclass(obj_type) or callable(obj_type)):
        raise TypeError(f'{registry.name} type must be a str or a class, got {obj_type!r}')


def _build(cfg, registry, default_args=None):
    _check_cfg(cfg, registry)
    return build_from_cfg(cfg, registry, default_args)


def _make(name):
    return Registry(name, build_func=_build)


MODELS = _make('model')
# mmdet 2.x names for parts of a model: one registry, so a config may use either name.
BACKBONES = NECKS = HEADS = LOSSES = DETECTORS = CLASSIFIERS = MODELS
# Anchor generators, box coders, assigners (mmdet 2.x: PRIOR_GENERATORS, BBOX_CODERS, ...).
TASK_UTILS = _make('task util')
PRIOR_GENERATORS = ANCHOR_GENERATORS = BBOX_CODERS = BBOX_ASSIGNERS = BBOX_SAMPLERS = TASK_UTILS
HOOKS = _make('hook')
RUNNERS = _make('runner')
DATASETS = _make('dataset')
TRANSFORMS = _make('transform')
PIPELINES = TRANSFORMS  # mmdet 2.x name
OPTIMIZERS = _make('optimizer')
OPTIMIZER_BUILDERS = _make('optimizer constructor')

for _name, _cls in vars(torch.optim).items():
    if inspect.isclass(_cls) and issubclass(_cls, torch.optim.Optimizer) \
            and _cls is not torch.optim.Optimizer:
        OPTIMIZERS.register_module(name=_name, module=_cls)


def build_model(cfg, default_args=None):
    return MODELS.build(cfg, default_args=default_args)


build_backbone = build_neck = build_head = build_loss = build_detector = build_model


def build_task_util(cfg, default_args=None):
    return TASK_UTILS.build(cfg, default_args=default_args)


def build_hook(cfg, default_args=None):
    return HOOKS.build(cfg, default_args=default_args)


def build_runner(cfg, default_args=None):
    return RUNNERS.build(cfg, default_args=default_args)


def build_dataset(cfg, default_args=None):
    """Use :func:`ckptzoo.datasets.build_dataset` for configs with a list ``ann_file``."""
    return DATASETS.build(cfg, default_args=default_args)


def build_transform(cfg, default_args=None):
    return TRANSFORMS.build(cfg, default_args=default_args)


def build_optimizer(model, cfg):
    """mmcv 1.x's ``build_optimizer``: ``optimizer = dict(type='SGD', lr=..., ...)`` from
    ``torch.optim``, built by ``constructor`` (default ``DefaultOptimizerConstructor``) with
    ``paramwise_cfg``. Without ``paramwise_cfg`` the model's trainable parameters form one
    group (frozen ones are left out: torch would accept them but they only waste state)."""
    if not isinstance(cfg, dict):
        raise TypeError(f'optimizer config must be a dict, got {cfg!r}')
    from .runner import optimizer_constructor  # noqa: F401  (registers the constructor)
    cfg = dict(cfg)
    constructor = cfg.pop('constructor', 'DefaultOptimizerConstructor')
    paramwise_cfg = cfg.pop('paramwise_cfg', None)
    builder = OPTIMIZER_BUILDERS.build(dict(type=constructor, optimizer_cfg=cfg,
                                            paramwise_cfg=paramwise_cfg))
    return builder(model)
