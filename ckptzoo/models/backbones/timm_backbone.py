"""mmcls 0.25's ``TIMMBackbone``: any timm model as a backbone (``timm.create_model``), with
checkpoint units found from the model's structure, not per family.

Arguments and state-dict keys (``timm_model.*``) are mmcls's: ``model_name``, ``features_only``,
``pretrained``, ``checkpoint_path``, ``in_channels``, ``init_cfg`` and any timm argument
(``out_indices``, ``drop_path_rate``, ``norm_layer`` as an mmcv norm name, ...). Unlike mmcls,
nothing is downloaded or read in the constructor: ``pretrained`` / ``checkpoint_path`` weights
are loaded by ``init_weights`` (so a config builds on the ``meta`` device), from the local
Hugging Face / torch hub cache only, and ``checkpoint_path`` works with ``features_only`` (mmcls
warns it breaks: timm then loads the classifier's keys into the feature net).

Checkpoint units. A features-only timm model runs a list of modules one after the other and
takes some outputs: a ``FeatureListNet`` / ``FeatureDictNet`` its modules (``return_layers``
taps them), an EfficientNet / MobileNetV3 feature net its stem modules then its ``blocks``
stages (``_stage_out_idx`` taps them). Each of those modules is a unit, except that a stage that
is an ``nn.Sequential`` of blocks (modules with children) becomes one unit per block, as timm's
``checkpoint_seq`` splits it, and a parameterless in-place module (``act1``) joins the unit
before it (alone, it would overwrite its own saved input). The units form one chain (segments
may span stages) run by this module's forward; the tapped outputs leave it. A model of any
other form (``FeatureHookNet``, ``FeatureGetterNet``, a classifier) is one coarse unit.
"""
import difflib
import os.path as osp
from collections import OrderedDict
from functools import partial

import torch
import torch.nn as nn

from ...registry import MODELS
from ..checkpointing import ChainStep, CheckpointUnit
from ..utils.norm import NORM_LAYERS
from .base import BaseBackbone

try:
    import timm
    from timm.models import FeatureDictNet, FeatureListNet
except ImportError:  # pragma: no cover (timm is a dependency)
    timm = FeatureDictNet = FeatureListNet = None

__all__ = ['TIMMBackbone']


def _check_model_name(model_name):
    if not isinstance(model_name, str) or not timm.is_model(model_name):
        names = timm.list_models()
        arch = model_name.split('.')[0] if isinstance(model_name, str) else str(model_name)
        close = difflib.get_close_matches(arch, names, n=5, cutoff=0.6)
        hint = f'did you mean {", ".join(close)}?' if close else \
            'timm.list_models() lists them'
        raise ValueError(f'unknown timm model_name {model_name!r} ({len(names)} models in timm '
                         f'{timm.__version__}): {hint}')


def _norm_layer(name):
    """mmcls: ``norm_layer`` is an mmcv norm name (``'BN'``, ``'GN'``, ...)."""
    if not isinstance(name, str):
        return name
    if name not in NORM_LAYERS:
        raise ValueError(f'unknown norm_layer {name!r}: allowed are {", ".join(NORM_LAYERS)} '
                         f'(or a norm class)')
    return NORM_LAYERS[name][0]


def _num_features(model_name, in_channels, kwargs):
    """How many features ``model_name`` offers (its full ``feature_info``, built on meta)."""
    rest = {k: v for k, v in kwargs.items() if k != 'out_indices'}
    with torch.device('meta'):
        model = timm.create_model(model_name, pretrained=False, in_chans=in_channels, **rest)
    return len(getattr(model, 'feature_info', None) or ())


def _sequence(model):
    """``(modules, taps, concat)`` when ``model``'s forward runs ``modules`` (``[(name,
    module)]``) one after the other and returns the outputs of those ``taps`` names (in order),
    else None."""
    if isinstance(model, FeatureDictNet):  # FeatureListNet too
        return list(model.items()), list(model.return_layers), model.concat
    stage_out = getattr(model, '_stage_out_idx', None)
    blocks = getattr(model, 'blocks', None)
    if isinstance(stage_out, dict) and isinstance(blocks, nn.Sequential) \
            and getattr(model, 'feature_hooks', True) is None:
        names = [n for n, _ in model.named_children()]
        stem = names[:names.index('blocks')]
        modules = [(n, getattr(model, n)) for n in stem] + \
            [(f'blocks.{i}', b) for i, b in enumerate(blocks)]
        taps = ([stem[-1]] if 0 in stage_out else []) + \
            [f'blocks.{i}' for i in range(len(blocks)) if i + 1 in stage_out]
        return modules, taps, False
    return None


def _is_block_stage(module):
    return isinstance(module, nn.Sequential) and len(module) > 0 \
        and all(len(child._modules) > 0 for child in module)


def _inplace_leaf(module):
    return getattr(module, 'inplace', False) is True and not module._modules \
        and not any(True for _ in module.parameters(recurse=False))


def _groups(modules, taps):
    """``[(unit name, [modules], number of taps ending there)]``."""
    groups = []
    for name, module in modules:
        if _is_block_stage(module):
            groups += [[f'{name}.{j}', [child], 0] for j, child in enumerate(module)]
        elif groups and _inplace_leaf(module):
            groups[-1][1].append(module)
        else:
            groups.append([name, [module], 0])
        groups[-1][2] += taps.count(name)
    return [tuple(g) for g in groups]


def _run_modules(modules, x):
    for m in modules:
        x = m(x)
    return x


def _feature(x, concat):
    """What a timm feature net takes from a tapped output (a tuple: its first tensor)."""
    if isinstance(x, (tuple, list)):
        return torch.cat(x, 1) if concat else x[0]
    return x


def _step(unit, modules, taps, concat, state):
    state = unit(partial(_run_modules, modules), state, module=modules)
    return state, ((_feature(state, concat), ) * taps if taps else None)


@MODELS.register_module()
class TIMMBackbone(BaseBackbone):
    """A timm model (mmcls 0.25's arguments; mmdet configs name it ``mmcls.TIMMBackbone``).

    Args:
        model_name (str): a name of ``timm.list_models()`` (a ``name.tag`` too).
        features_only (bool): timm's feature pyramid (``out_indices`` picks its levels).
        pretrained (bool): timm's pretrained weights, loaded by ``init_weights`` from the local
            Hugging Face or torch hub cache (nothing is downloaded).
        checkpoint_path (str): a weight file of the timm model, loaded by ``init_weights``.
        in_channels (int): input channels (timm's ``in_chans``).
        init_cfg (dict): mmcls's; a ``Pretrained`` one loads as for every backbone.
        with_cp (bool): ckptzoo's: every checkpoint unit ``'full'``.
        cp_use_reentrant (bool): torch's reentrant checkpoint implementation.
        **kwargs: passed to ``timm.create_model`` (``out_indices``, ``drop_path_rate``, ...).
    """

    def __init__(self, model_name, features_only=False, pretrained=False, checkpoint_path='',
                 in_channels=3, init_cfg=None, with_cp=False, cp_use_reentrant=False, **kwargs):
        super().__init__()
        if timm is None:  # pragma: no cover
            raise RuntimeError('TIMMBackbone needs timm: pip install timm')
        _check_model_name(model_name)
        if not isinstance(pretrained, bool):
            raise TypeError(f'pretrained must be a bool (a weight file goes in checkpoint_path), '
                            f'got {pretrained!r}')
        if not isinstance(checkpoint_path, str):
            raise TypeError(f'checkpoint_path must be a str, got {checkpoint_path!r}')
        if 'norm_layer' in kwargs:
            kwargs['norm_layer'] = _norm_layer(kwargs['norm_layer'])
        self.model_name = model_name
        self.features_only = features_only
        self.pretrained = pretrained
        self.checkpoint_path = checkpoint_path
        self.in_channels = in_channels
        self.init_cfg = init_cfg
        self._timm_kwargs = dict(kwargs)
        self.timm_model = self._create(pretrained=False)
        if hasattr(self.timm_model, 'reset_classifier'):
            self.timm_model.reset_classifier(0, '')
        self.cp_use_reentrant = cp_use_reentrant
        sequence = _sequence(self.timm_model)
        flag = bool(with_cp)
        if sequence is None:
            self._groups, self._concat = [('timm_model', [self.timm_model], 0)], False
        else:
            modules, taps, self._concat = sequence
            self._groups = [(f'timm_model.{n}', ms, t) for n, ms, t in _groups(modules, taps)]
        self._sequential = sequence is not None
        self._units = [CheckpointUnit.from_flag(flag, cp_use_reentrant) for _ in self._groups]

    def _create(self, **extra):
        kwargs = dict(model_name=self.model_name, features_only=self.features_only,
                      in_chans=self.in_channels, **self._timm_kwargs, **extra)
        try:
            return timm.create_model(**kwargs)
        except IndexError as exc:  # timm's out_indices out of range
            out_indices = kwargs.get('out_indices')
            if not self.features_only or out_indices is None:
                raise
            n = _num_features(self.model_name, self.in_channels, self._timm_kwargs)
            raise ValueError(f'out_indices {out_indices!r} out of range for timm model '
                             f'{self.model_name!r}: it has {n} features, indices 0..{n - 1} '
                             f'(or -{n}..-1)') from exc

    # ------------------------------------------------------------------ weights
    def init_weights(self):
        """mmcls loads ``pretrained`` / ``checkpoint_path`` in the constructor; here (so a
        config builds on ``meta``): a twin built by timm with the weights, copied strictly."""
        from ..utils.pretrained import load_pretrained
        if self.pretrained or self.checkpoint_path:
            path = self.checkpoint_path or self._cached_pretrained_file()
            if not osp.isfile(path):
                raise FileNotFoundError(f'TIMMBackbone checkpoint_path {path!r} not found')
            twin = self._create(pretrained=True, pretrained_cfg_overlay=dict(file=path))
            if hasattr(twin, 'reset_classifier'):
                twin.reset_classifier(0, '')
            self.timm_model.load_state_dict(twin.state_dict())
        if self.init_cfg is not None:
            load_pretrained(self, self.init_cfg, 'TIMMBackbone')

    def _cached_pretrained_file(self):
        """The local file of timm's pretrained weights (Hugging Face or torch hub cache)."""
        cfg = timm.models.get_pretrained_cfg(self.model_name)
        cfg = cfg.to_dict() if cfg is not None else {}
        tried = []
        if cfg.get('hf_hub_id'):
            from huggingface_hub import try_to_load_from_cache
            repo = cfg['hf_hub_id'].split('@')[0]
            for filename in ('model.safetensors', 'pytorch_model.bin'):
                found = try_to_load_from_cache(repo, filename)
                if isinstance(found, str):
                    return found
            tried.append(f'the Hugging Face cache (hf download {repo})')
        if cfg.get('url'):
            path = osp.join(torch.hub.get_dir(), 'checkpoints', osp.basename(cfg['url']))
            if osp.isfile(path):
                return path
            tried.append(path)
        if cfg.get('file'):
            return cfg['file']
        raise FileNotFoundError(
            f'TIMMBackbone {self.model_name!r}: pretrained weights are not downloaded at run '
            f'time and none are cached; put them in {" or ".join(tried) or "a file"}, or give '
            f'checkpoint_path=PATH')

    # ------------------------------------------------------------------ units
    def _checkpoint_steps(self):
        """One chain: the units found in ``__init__``, the tapped ones emitting features."""
        if not self._sequential:
            return [[ChainStep('timm_model', self._units[0],
                               partial(_step, self._units[0], [self.timm_model], 0, False),
                               self.timm_model)]]
        return [[ChainStep(name, unit, partial(_step, unit, modules, taps, self._concat),
                           modules, (), taps > 0)
                 for (name, modules, taps), unit in zip(self._groups, self._units)]]

    def forward(self, x):
        """mmcls's output: the feature list as a tuple, any other output as a 1-tuple."""
        state, outs = self._run_chain(self._checkpoint_steps()[0], x)
        if not self._sequential:
            return tuple(state) if isinstance(state, (list, tuple)) else (state, )
        feats = [f for out in outs if out is not None for f in out]
        if isinstance(self.timm_model, FeatureDictNet) \
                and not isinstance(self.timm_model, FeatureListNet):
            return (OrderedDict(zip(self.timm_model.return_layers.values(), feats)), )
        return tuple(feats)
