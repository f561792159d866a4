"""Whether a checkpoint fits the model (and the optimizer) it goes into, said before loading.

torch and mmcv find a mismatch while copying (the model half loaded), or not at all: an
optimizer state of another depth fails inside ``torch/optim/sgd.py`` at the first step, an
unrelated ``load_from`` only warns and trains from scratch. Here the checkpoint is compared
with the model first, and what does not fit is named with the file. Three strengths:

* **exact** (``strict=True``, ``runner.resume``): every key and shape matches;
* **complete** (testing a trained model: ``tools/test.py``, ``init_detector``): every tensor of
  the model comes from the checkpoint with its shape; keys the model lacks (``ema_*`` of an EMA
  run) are warned about;
* **partial** (``strict=False``: ``load_from``, ``init_cfg=dict(type='Pretrained')``), mmcv's
  semantics for fine-tuning, e.g. a COCO detector into a 3-class one: missing keys, unexpected
  keys and shape mismatches are warned about, and the mismatched tensors keep their
  initialisation (mmcv warns ``size mismatch for bbox_head.retina_cls.weight``). Fewer than
  half of the model's tensors loading is an unrelated checkpoint, and an error.
"""
import warnings
from collections import OrderedDict
from dataclasses import dataclass

import torch

from ..ops.deform_conv import upgrade_offset_keys

__all__ = ['CheckpointMismatch', 'StateMatch', 'match_state_dict', 'load_state_dict',
           'check_resumable',
           'optimizer_hparams', 'optimizer_mismatch', 'hyperparameter_changes',
           'apply_hyperparameters', 'describe_changes']

_SHOWN = 5  # keys listed per kind; the rest are counted


class CheckpointMismatch(RuntimeError):
    """A checkpoint that does not fit the model or optimizer it was to be loaded into."""


def _listed(items, show=str):
    items = list(items)
    text = ', '.join(show(i) for i in items[:_SHOWN])
    return text + (f' and {len(items) - _SHOWN} more' if len(items) > _SHOWN else '')


@dataclass
class StateMatch:
    """How a state dict compares with a model's: ``shapes`` holds ``(key, checkpoint shape,
    model shape)``; ``loaded`` of the model's ``total`` tensors come from the checkpoint."""

    filename: str
    missing: list
    unexpected: list
    shapes: list
    loaded: int
    total: int

    def problems(self, kinds=('missing', 'unexpected', 'shapes')):
        out = []
        if 'missing' in kinds and self.missing:
            out.append(f'{len(self.missing)} keys of the model missing from the checkpoint: '
                       f'{_listed(self.missing)}')
        if 'unexpected' in kinds and self.unexpected:
            out.append(f'{len(self.unexpected)} keys of the checkpoint not in the model: '
                       f'{_listed(self.unexpected)}')
        if 'shapes' in kinds and self.shapes:
            out.append(f'{len(self.shapes)} shape mismatches: ' + _listed(
                self.shapes, lambda s: f'{s[0]} {list(s[1])} in the checkpoint, {list(s[2])} '
                'in the model'))
        return out


def _derived_keys(module):
    """Buffers a module computes itself and fills in on load (``_derived_state``, e.g. Swin's
    ``relative_position_index``): a checkpoint may lack them."""
    return {f'{name}.{key}' if name else key for name, m in module.named_modules()
            for key in getattr(m, '_derived_state', ())}


def match_state_dict(module, state_dict, filename, restored_elsewhere=None):
    """A :class:`StateMatch` of ``state_dict`` against ``module``. ``restored_elsewhere(key)``:
    keys neither side needs (the EMA hook restores its ``ema_*`` buffers itself). BatchNorm's
    ``num_batches_tracked`` may be missing (torch fills it in)."""
    def elsewhere(key):
        return restored_elsewhere is not None and restored_elsewhere(key)

    own = module.state_dict()
    derived = _derived_keys(module)
    counted = [k for k in own if not k.endswith('num_batches_tracked') and k not in derived]
    missing = [k for k in counted if k not in state_dict and not elsewhere(k)]
    unexpected = [k for k in state_dict if k not in own and not elsewhere(k)]
    shapes = [(k, tuple(v.shape), tuple(own[k].shape)) for k, v in state_dict.items()
              if k in own and k not in derived and torch.is_tensor(v)
              and tuple(v.shape) != tuple(own[k].shape)]
    mismatched = {k for k, _, _ in shapes}
    loaded = sum(k in state_dict and k not in mismatched for k in counted)
    return StateMatch(str(filename), missing, unexpected, shapes, loaded, len(counted))


def load_state_dict(module, state_dict, filename, strict=False, complete=False, logger=None,
                    restored_elsewhere=None):
    """Check ``state_dict`` against ``module`` at the strength ``strict`` / ``complete`` ask
    for (see the module docstring), raise :class:`CheckpointMismatch` naming the file and the
    differences before anything is copied, warn about the tolerated ones, then load (tensors of
    another shape keep their values). Returns the :class:`StateMatch`."""
    state_dict = upgrade_offset_keys(module, state_dict)  # mmcv's old DCN offset keys
    match = match_state_dict(module, state_dict, filename, restored_elsewhere)
    fatal = (('missing', 'unexpected', 'shapes') if strict else
             ('missing', 'shapes') if complete else ())
    errors = match.problems(fatal)
    if errors:
        need = 'the same keys and shapes' if strict else 'every tensor of the model'
        raise CheckpointMismatch(f'checkpoint {filename} does not fit the model ({need} '
                                 f'needed): ' + '; '.join(errors))
    if not strict and not complete and match.total and 2 * match.loaded < match.total:
        raise CheckpointMismatch(
            f'checkpoint {filename} is not a checkpoint of this model: only {match.loaded} of '
            f"the model's {match.total} tensors would load from it ("
            + '; '.join(match.problems()) + '). For backbone weights use init_cfg=dict('
            "type='Pretrained', checkpoint=..., prefix=...) in the backbone")
    warned = match.problems()
    if warned:
        message = f'checkpoint {filename} does not match the model exactly: ' + '; '.join(
            warned) + (' (these keep their initial values)' if match.shapes else '')
        if logger is not None:
            logger.warning(message)
        else:
            warnings.warn(message, UserWarning, stacklevel=3)
    skip = {k for k, _, _ in match.shapes}
    loadable = OrderedDict((k, v) for k, v in state_dict.items() if k not in skip)
    loadable._metadata = getattr(state_dict, '_metadata', OrderedDict())
    module.load_state_dict(loadable, strict=False)
    return match


# -- optimizers -----------------------------------------------------------------------------
def check_resumable(module, optimizer, state_dict, optim_state, stored, filename,
                    restored_elsewhere=None):
    """Raise :class:`CheckpointMismatch` unless a resume from ``filename`` fits exactly: the
    model's keys and shapes, and (when the checkpoint has an optimizer state) the optimizer's
    type, param groups and state shapes. ``stored``: the checkpoint's ``optimizer_hparams``."""
    problems = match_state_dict(module, state_dict, filename, restored_elsewhere).problems()
    if optim_state is not None and optimizer is not None:
        problems += optimizer_mismatch(optimizer, optim_state, filename, stored,
                                       state_shapes=not problems)
    if problems:
        raise CheckpointMismatch(
            f'cannot resume from {filename}: it does not fit this run (a resume needs the same '
            'model and optimizer): ' + '; '.join(problems) + '. To start from its weights '
            'instead, use load_from (--load-from)')


def _plain(value):
    if isinstance(value, (list, tuple)):
        return all(_plain(v) for v in value)
    return value is None or isinstance(value, (bool, int, float, str))


def _optimizers(optimizer):
    return optimizer.items() if isinstance(optimizer, dict) else [(None, optimizer)]


def optimizer_hparams(optimizer):
    """The optimizer's type and per-group hyper-parameters as configured (plain values): a
    checkpoint's ``meta['optimizer_hparams']``, the baseline a resumed run compares with (its
    param groups hold the *scheduled* lr and momentum). A dict of optimizers gives a dict."""
    def one(optim):
        return dict(type=type(optim).__name__, param_groups=[
            {k: v for k, v in g.items() if k != 'params' and _plain(v)}
            for g in optim.param_groups])
    if isinstance(optimizer, dict):
        return {name: one(optim) for name, optim in optimizer.items()}
    return one(optimizer)


def _stored(stored, name):
    if not isinstance(stored, dict):
        return None
    info = stored if name is None else stored.get(name)
    return info if isinstance(info, dict) and 'param_groups' in info else None


def optimizer_mismatch(optimizer, state, filename, stored=None, state_shapes=True):
    """What keeps the optimizer state ``state`` (a state dict, or a dict of them) from fitting
    ``optimizer``: the type, the param groups and their sizes, the shapes of per-parameter
    state (unless ``state_shapes`` is False: the model's shapes already differ). A list of
    sentences, empty when it fits. ``stored``: the checkpoint's ``meta['optimizer_hparams']``
    (names the type)."""
    if isinstance(optimizer, dict):
        if not isinstance(state, dict) or set(state) != set(optimizer):
            return [f'optimizers {sorted(optimizer)} in this run, '
                    f'{sorted(state) if isinstance(state, dict) else type(state).__name__} in '
                    f'{filename}']
        return [p for name in optimizer for p in _one_mismatch(
            optimizer[name], state[name], _stored(stored, name), f'optimizer {name!r}',
            state_shapes)]
    return _one_mismatch(optimizer, state, _stored(stored, None), 'optimizer', state_shapes)


def _one_mismatch(optim, state, stored, what, state_shapes):
    if not isinstance(state, dict) or not isinstance(state.get('param_groups'), list):
        return [f'{what}: the checkpoint holds no optimizer state dict']
    own = type(optim).__name__
    groups = state['param_groups']
    if stored is not None and stored.get('type') != own:
        return [f'{what}: {stored.get("type")} in the checkpoint, {own} in this run']
    if stored is None and groups and optim.param_groups:
        ignore = {'params', 'initial_lr', 'initial_momentum'}
        theirs, ours = set(groups[0]) - ignore, set(optim.param_groups[0]) - ignore
        if theirs - ours and ours - theirs:  # keys of another algorithm (a newer torch only adds)
            return [f"{what}: the checkpoint's has param-group keys {sorted(theirs - ours)} "
                    f'that {own} does not have, and lacks {sorted(ours - theirs)}: '
                    'another optimizer type']
    if len(groups) != len(optim.param_groups):
        return [f'{what}: {len(groups)} param groups in the checkpoint, '
                f'{len(optim.param_groups)} in this run']
    sizes = [(len(g['params']), len(o['params'])) for g, o in zip(groups, optim.param_groups)]
    if any(a != b for a, b in sizes):
        return [f'{what}: parameters per param group {[a for a, _ in sizes]} in the '
                f'checkpoint, {[b for _, b in sizes]} in this run']
    wrong = []
    per_param = state.get('state', {}) if state_shapes else {}
    for group, own_group in zip(groups, optim.param_groups):
        for index, param in zip(group['params'], own_group['params']):
            for key, value in per_param.get(index, {}).items():
                if torch.is_tensor(value) and value.dim() > 0 \
                        and not _broadcasts(value.shape, param.shape):
                    wrong.append(f'{key} of parameter {index}: {list(value.shape)} in the '
                                 f'checkpoint, parameter {list(param.shape)}')
    return [f'{what}: state of another shape: {_listed(wrong)}'] if wrong else []


def _broadcasts(shape, target):
    try:
        return torch.broadcast_shapes(shape, target) == target
    except RuntimeError:
        return False


def _configured_groups(state, stored):
    """The checkpoint's param groups as configured: ``stored`` when saved, else its groups
    with the schedules' bases (``initial_lr``, ``initial_momentum``) for lr and momentum."""
    if stored is not None and len(stored['param_groups']) == len(state['param_groups']):
        return stored['param_groups']
    groups = []
    for group in state['param_groups']:
        group = {k: v for k, v in group.items() if k != 'params'}
        if 'initial_lr' in group:
            group['lr'] = group['initial_lr']
        if 'initial_momentum' in group:
            if 'momentum' in group:
                group['momentum'] = group['initial_momentum']
            elif 'betas' in group:
                group['betas'] = (group['initial_momentum'], *group['betas'][1:])
        groups.append(group)
    return groups


def _same(a, b):
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if torch.is_tensor(a) or torch.is_tensor(b):
        return torch.is_tensor(a) and torch.is_tensor(b) and torch.equal(a, b)
    return a == b


def hyperparameter_changes(optimizer, state, stored=None):
    """``[(optimizer name or None, group index, key, checkpoint value, config value)]`` for
    the hyper-parameters (lr, momentum, weight_decay, ...) the config sets differently from
    the run that saved ``state``."""
    changes = []
    for name, optim in _optimizers(optimizer):
        ckpt = state[name] if name is not None else state
        groups = _configured_groups(ckpt, _stored(stored, name))
        for i, (theirs, ours) in enumerate(zip(groups, optim.param_groups)):
            for key, value in ours.items():
                if key in ('params', 'initial_lr', 'initial_momentum') or key not in theirs:
                    continue
                if not _same(theirs[key], value):
                    changes.append((name, i, key, theirs[key], value))
    return changes


def apply_hyperparameters(optimizer, changes):
    """After ``optimizer.load_state_dict``: the config's values win, and the bases the lr and
    momentum schedules compute from (``initial_lr``, ``initial_momentum``) follow them."""
    for name, index, key, _, value in changes:
        optim = optimizer[name] if name is not None else optimizer
        group = optim.param_groups[index]
        group[key] = value
        base = {'lr': ('initial_lr', value), 'momentum': ('initial_momentum', value),
                'betas': ('initial_momentum', value[0] if isinstance(value, (list, tuple))
                          else None)}.get(key)
        if base is not None and base[0] in group:
            group[base[0]] = base[1]


def describe_changes(changes, filename):
    """One sentence naming each changed hyper-parameter, its two values and which is used."""
    merged = OrderedDict()
    for name, index, key, old, new in changes:
        label = f'{name}.{key}' if name is not None else key
        merged.setdefault((label, repr(old), repr(new)), []).append(index)
    parts = [f'{label} {old} in {filename}, {new} in the config (param groups '
             f'{_listed(indices)})' for (label, old, new), indices in merged.items()]
    return ('optimizer hyper-parameters differ from the checkpoint: ' + '; '.join(parts)
            + ". The run uses the config's values (the lr and momentum schedules continue from "
            'them); the optimizer state (momentum buffers, step counts) comes from the '
            'checkpoint')
