"""Checkpoint units for a model part that describes none: a backbone, neck or head that a user
registers (``custom_imports``) without :class:`~.plan.CheckpointOwnerMixin`.

Its units are read from its module tree when the detector holding it is built (a user's head
that a built-in owner runs inside one of its units is planned with that unit), so ``with_cp``,
checkpoint plans, segments and the planner work on it as on the built-in families:

- a *block* is a module with parameters and sub-modules (a conv, a norm or an activation alone
  is no block: it runs plainly between units);
- a *stage* is an ``nn.Sequential`` or ``nn.ModuleList`` whose elements are all blocks; each
  element is a unit, named by its path (``backbone.stages.1.3``), unless it is or holds
  stages of its own, which are then used instead (a stage of stages gives the inner blocks);
- a block outside any stage is searched the same way, and is a unit itself where it holds no
  stage (a ``stem`` of conv, norm and ReLU; a transformer block of attention and MLP);
- a part with no block at all is one *coarse* unit, named as the part
  (``neck``);
- an ``nn.ModuleList`` / ``nn.ModuleDict`` is no unit itself (nothing calls it), only its
  blocks are.

The elements of an ``nn.Sequential`` stage that are all units form a chain (segments may span
them): the stage's forward becomes :func:`~.segments.run_chain` over them. Any other unit is run
through its :class:`~.plan.CheckpointUnit` by its own ``forward`` (an attribute of the instance,
so the state-dict keys and the class are unchanged). Every mode is exact as for the built-in
units: the same :func:`~.functional.checkpoint` (the grad guard, RNG replay, BN statistics
kept), the non-reentrant implementation (a part's inputs may be lists of tensors).

A part that wants other units describes them itself: mix in
:class:`~.plan.CheckpointOwnerMixin` and override ``_checkpoint_steps`` (docs/design.md,
"Adding a model family with its checkpoint units"); nothing is derived for it then.
"""
from functools import partial
from typing import List, Tuple

import torch.nn as nn

from ...registry import set_unit_deriver
from .plan import CheckpointOwnerMixin, CheckpointUnit
from .segments import run_chain, unit_step

__all__ = ['DerivedUnits', 'derive_checkpoint_units', 'derived_units']

_STAGES = (nn.Sequential, nn.ModuleList)


def _is_block(module: nn.Module) -> bool:
    return next(module.children(), None) is not None and \
        next(module.parameters(), None) is not None


def _described(module: nn.Module) -> bool:
    return isinstance(module, CheckpointOwnerMixin) or derived_units(module) is not None


def _is_stage(module: nn.Module) -> bool:
    items = list(module.children())
    return isinstance(module, _STAGES) and bool(items) and all(map(_is_block, items))


def _holds_stage(module: nn.Module) -> bool:
    return any(_is_stage(m) or _described(m) for m in module.modules() if m is not module)


def _find(module: nn.Module, path: str, out: list) -> None:
    """Append ``(path, module, sequential stage path or None)`` for the units under ``module``."""
    for name, child in module.named_children():
        if not _described(child) and _is_block(child):
            _unit_or_inside(child, f'{path}{name}', out, None)


def _unit_or_inside(block: nn.Module, where: str, out: list, seq) -> None:
    if _is_stage(block):
        items = list(block.children())
        # an nn.Sequential is a chain when each element is a unit (its forward runs them all)
        chain = isinstance(block, nn.Sequential) and not any(
            _described(m) or _is_stage(m) or _holds_stage(m) for m in items)
        for key, item in block.named_children():
            if not _described(item):
                _unit_or_inside(item, f'{where}.{key}', out, where if chain else None)
    elif _holds_stage(block) or isinstance(block, (nn.ModuleList, nn.ModuleDict)):
        _find(block, f'{where}.', out)  # a list or dict of modules is never called itself
    else:
        out.append((where, block, seq))


class _UnitForward:
    """A unit's ``forward``: the module's own, run through its unit."""

    def __init__(self, unit, module, forward):
        self.unit, self.module, self.forward = unit, module, forward

    def __call__(self, *args, **kwargs):
        function = partial(self.forward, **kwargs) if kwargs else self.forward
        return self.unit(function, *args, module=self.module)


class _StageForward:
    """An ``nn.Sequential`` stage's ``forward``: its elements as a chain of the owner's."""

    def __init__(self, owner, path):
        self.owner, self.path = owner, path

    def __call__(self, x):
        state, _ = run_chain(self.owner._chain(self.path), x, self.owner._cp_segments)
        return state


class DerivedUnits:
    """The units derived for ``part`` (see the module docstring); the checkpoint owner that
    :class:`~.plan.CheckpointOwnerMixin` finds on it (``part.checkpoint_owner``)."""

    def __init__(self, part: nn.Module, mode=None):
        found: List[Tuple[str, nn.Module, str]] = []
        _find(part, '', found)
        if not found:
            found = [('', part, None)]
        self.entries = [(name, module, CheckpointUnit(mode), seq) for name, module, seq in found]
        self._cp_segments = {}
        for name, module, unit, seq in self.entries:
            if seq is None:
                module.forward = _UnitForward(unit, module, module.forward)
        for seq in dict.fromkeys(seq for *_, seq in self.entries if seq is not None):
            stage = part.get_submodule(seq)
            stage.forward = _StageForward(self, seq)

    def _chain(self, seq):
        return [unit_step(name, unit, module) for name, module, unit, s in self.entries
                if s == seq]

    def _checkpoint_steps(self):
        """Each ``nn.Sequential`` stage one chain, any other unit a chain of one."""
        chains, seen = [], set()
        for name, module, unit, seq in self.entries:
            if seq is None:
                chains.append([unit_step(name, unit, module)])
            elif seq not in seen:
                seen.add(seq)
                chains.append(self._chain(seq))
        return chains


def derived_units(module: nn.Module):
    """The :class:`DerivedUnits` of ``module``, or None."""
    owner = vars(module).get('checkpoint_owner')
    return owner if isinstance(owner, DerivedUnits) else None


def derive_checkpoint_units(part: nn.Module, with_cp=False) -> nn.Module:
    """Give ``part`` derived units (``with_cp``: True or a mode sets them all), unless it or
    its units are described already; returns ``part``."""
    if _described(part):
        return part
    mode = CheckpointUnit.from_flag(with_cp).mode
    part.checkpoint_owner = DerivedUnits(part, mode)
    return part


def _undescribed_parts(module):
    for child in module.children():
        if _described(child):
            continue
        if _REQUEST in vars(child):
            yield child
        elif isinstance(child, _STAGES):  # a list of necks
            yield from _undescribed_parts(child)


def _covered(owner):
    """The modules that ``owner``'s own units run (a part inside one needs none of its own)."""
    modules = []
    for chain in owner._checkpoint_steps():
        for step in chain:
            given = step.module
            given = [given] if isinstance(given, nn.Module) else list(given or ())
            modules += [m for g in given for m in g.modules()]
    return {id(m) for m in modules}


def _after_build(obj, with_cp):
    """The registry's step after building a model part (see ``ckptzoo.registry``): a user's
    part waits for its container; the container (a detector, a classifier) derives units for
    its user parts, except for a part that one of its own units runs (a mask head in
    ``roi_head.mask``): that part is checkpointed and planned with that unit."""
    if with_cp is not None:  # a part the registry found undescribed (``derives_units``)
        setattr(obj, _REQUEST, with_cp)
    elif isinstance(obj, CheckpointOwnerMixin):
        parts = list(_undescribed_parts(obj))
        covered = _covered(obj) if parts else set()
        for part in parts:
            with_cp = vars(part).pop(_REQUEST)
            if id(part) not in covered:
                derive_checkpoint_units(part, with_cp)
    return obj


_REQUEST = '_derived_with_cp'
set_unit_deriver(_after_build)
