"""The registries that turn config dicts into objects.

Type names are those of mmcv 1.x / mmdet 2.x so their configs run unchanged. mmdet 2.x had one
registry per model part (BACKBONES, NECKS, ...); here they are aliases of one MODELS registry,
so a config may name any model part anywhere. Building an unknown ``type`` fails with an error
that names the type, the registry and the closest registered names (mmengine only says
"not in the registry"). A key that the class of a ``type`` does not take fails the same way
(:func:`accepted_args` reads the schema from the class's signature, :func:`check_keys` names
the unknown key and its close matches).
"""
import difflib
import inspect

import torch
from mmengine.registry import Registry, build_from_cfg


class UnknownTypeError(KeyError):
    """Raised for a ``type`` no registry entry has; ``str()`` is the plain message."""

    def __str__(self):
        return self.args[0] if self.args else ''


class UnknownKeyError(KeyError, TypeError):
    """A config key that nothing reads (a KeyError: an unknown key; a TypeError, as Python's
    own "unexpected keyword argument"); ``str()`` is the plain message."""

    def __str__(self):
        return self.args[0] if self.args else ''


def check_keys(keys, allowed, where='', owner=None):
    """Fail naming every key of ``keys`` not in ``allowed``, with the close matches
    (``difflib.get_close_matches``), else the allowed keys: ``unknown config key 'runer' (did
    you mean 'runner'?)``. ``where`` is the dotted path of the dict the keys are in."""
    allowed = sorted(set(allowed))
    unknown = sorted(k for k in keys if k not in allowed)
    if not unknown:
        return
    prefix = f'{where}.' if where else ''
    parts = []
    for key in unknown:
        close = difflib.get_close_matches(str(key), allowed, n=3, cutoff=0.6)
        hint = f' (did you mean {" or ".join(repr(prefix + c) for c in close)}?)' if close else ''
        parts.append(f'{prefix + str(key)!r}{hint}')
    noun = 'key' if len(unknown) == 1 else 'keys'
    by = f'by {owner}' if owner else f'in {where or "the config"}'
    raise UnknownKeyError(f'unknown config {noun} {", ".join(parts)}; allowed {by}: '
                          f'{", ".join(allowed)}')


def accepted_args(obj):
    """The keyword arguments a config dict may give ``obj`` (a class or a function): the names
    of its signature, following ``**kwargs`` up the class hierarchy to the next ``__init__``
    (ckptzoo's classes pass them on to ``super().__init__``, as ResNeXt to ResNet). None when
    the ``**kwargs`` go elsewhere (they reach ``object``, as CheckpointHook's reach
    ``runner.save_checkpoint`` and EvalHook's ``dataset.evaluate``): then any key may be right
    and the class checks them itself."""
    functions = [obj] if not inspect.isclass(obj) else [
        vars(k)['__init__'] for k in obj.__mro__ if '__init__' in vars(k) and k is not object]
    names = set()
    for fn in functions:
        try:
            params = list(inspect.signature(fn).parameters.values())
        except (TypeError, ValueError):
            return None
        if inspect.isclass(obj):
            params = params[1:]  # self
        names.update(p.name for p in params
                     if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY))
        if not any(p.kind == p.VAR_KEYWORD for p in params):
            return names
    return None


#: scopes of OpenMMLab packages whose model names ckptzoo registers itself: a config's
#: ``type='mmcls.TIMMBackbone'`` or ``'mmdet.ResNet'`` is ckptzoo's ``TIMMBackbone`` /
#: ``ResNet`` (and ``custom_imports`` of these packages import nothing: see
#: :func:`ckptzoo.apis.config.loading.import_custom_modules`)
PROVIDED_SCOPES = ('mmcls', 'mmdet')


def unscoped(obj_type):
    """``'mmcls.ConvNeXt'`` -> ``'ConvNeXt'`` (a scope of :data:`PROVIDED_SCOPES`); any other
    type as it is."""
    if isinstance(obj_type, str):
        scope, _, name = obj_type.partition('.')
        if name and '.' not in name and scope in PROVIDED_SCOPES:
            return name
    return obj_type


def check_type(cfg, registry):
    """``cfg`` is a dict whose ``type`` ``registry`` has (else fail with the close matches)."""
    if not isinstance(cfg, dict):
        raise TypeError(f'a {registry.name} config must be a dict with a "type" key, '
                        f'got {type(cfg).__name__}: {cfg!r}')
    if 'type' not in cfg:
        raise KeyError(f'a {registry.name} config needs a "type" key, got keys {sorted(cfg)}')
    obj_type = cfg['type']
    if isinstance(obj_type, str) and registry.get(unscoped(obj_type)) is None:
        names = sorted(registry.module_dict)
        close = difflib.get_close_matches(obj_type, names, n=5, cutoff=0.5)
        hint = (f'did you mean {", ".join(close)}?' if close else
                f'registered: {", ".join(names)}')
        raise UnknownTypeError(f'unknown {registry.name} type {obj_type!r}: {hint}')
    if not (isinstance(obj_type, str) or inspect.isclass(obj_type) or callable(obj_type)):
        raise TypeError(f'{registry.name} type must be a str or a class, got {obj_type!r}')


#: ``after_build(part, with_cp) -> part``, run on every model part built (``with_cp`` None
#: unless the part is a user's that describes no units): gives such parts derived checkpoint
#: units; set by :mod:`ckptzoo.models.checkpointing.derived` (above this module)
_unit_deriver = None


def set_unit_deriver(derive):
    global _unit_deriver
    _unit_deriver = derive


def derives_units(cls):
    """True for a model part class that ckptzoo did not write (a user's, registered through
    ``custom_imports``) and that describes no checkpoint units: it gets derived ones."""
    return inspect.isclass(cls) and issubclass(cls, torch.nn.Module) and \
        not hasattr(cls, '_checkpoint_steps') and \
        cls.__module__.split('.')[0] not in ('ckptzoo', 'torch', 'torchvision')


def takes_with_cp(cls):
    """Whether ``with_cp`` in a part's config goes to the class (else to its derived units)."""
    allowed = accepted_args(cls)
    return allowed is None or 'with_cp' in allowed


def _build(cfg, registry, default_args=None):
    check_type(cfg, registry)
    if unscoped(cfg['type']) is not cfg['type']:
        cfg = {**cfg, 'type': unscoped(cfg['type'])}
    if registry is not MODELS or _unit_deriver is None:
        return build_from_cfg(cfg, registry, default_args)
    cls = registry.get(cfg['type']) if isinstance(cfg['type'], str) else cfg['type']
    with_cp = None  # not a user's part
    if derives_units(cls):
        with_cp = False
        if not takes_with_cp(cls):
            cfg = dict(cfg)
            with_cp = cfg.pop('with_cp', False)
    return _unit_deriver(build_from_cfg(cfg, registry, default_args), with_cp)


class _Registry(Registry):
    """mmengine's Registry, reading a provided scope (``mmcls.X``) as ckptzoo's own ``X``
    (mmengine would look for an ``mmcls`` registry and find none)."""

    def get(self, key):
        return super().get(unscoped(key))


def _make(name):
    return _Registry(name, build_func=_build)


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
    cfg = dict(cfg)  # the constructors are registered by ckptzoo.runner (imported by ckptzoo)
    constructor = cfg.pop('constructor', 'DefaultOptimizerConstructor')
    paramwise_cfg = cfg.pop('paramwise_cfg', None)
    builder = OPTIMIZER_BUILDERS.build(dict(type=constructor, optimizer_cfg=cfg,
                                            paramwise_cfg=paramwise_cfg))
    return builder(model)
# mmcv 1.x's transformer registries and mmdet 2.x's TRANSFORMER / POSITIONAL_ENCODING /
# MATCH_COST: aliases too
ATTENTION = FEEDFORWARD_NETWORK = TRANSFORMER_LAYER = TRANSFORMER_LAYER_SEQUENCE = MODELS
TRANSFORMER = POSITIONAL_ENCODING = MODELS
MATCH_COST = TASK_UTILS
