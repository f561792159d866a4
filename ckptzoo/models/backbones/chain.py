"""Backbones whose forward is one chain of modules (MobileNetV2, EfficientNet, CSPDarknet,
Darknet, SSDVGG): each link of the chain is a checkpoint unit, described once here.

A subclass lists its links (:meth:`ChainBackbone._links`: name, the modules run in order, and
whether the output leaves the chain as one of ``out_indices``) and gives each a unit in
``self.cp_units`` (:meth:`_make_units`). A link whose module applies its own unit (an
``InvertedResidual`` with ``cp_unit``) is called as it is; any other runs through its unit.
The chain stops after the last output taken: later links are units of their own that this
configuration never runs (their outputs would be discarded, as mmdet discards them).
"""
from collections import OrderedDict

from ..checkpointing import CheckpointUnit, chain_and_rest, chain_step, unit_step
from .base import BaseBackbone

__all__ = ['ChainBackbone']


def _run_modules(modules, x):
    for m in modules:
        x = m(x)
    return x


class ChainBackbone(BaseBackbone):
    """Subclasses implement :meth:`_links` and call :meth:`_make_units` once built."""

    def _links(self):
        """``[(name, [modules], emit)]`` in execution order."""
        raise NotImplementedError

    def _make_units(self, with_cp, cp_use_reentrant):
        """One unit per link: a self-checkpointing module's own ``cp_unit``, else a new unit,
        ``'full'`` when ``with_cp``."""
        self.cp_use_reentrant = cp_use_reentrant
        self.cp_units = OrderedDict()
        for name, modules, _ in self._links():
            own = getattr(modules[0], 'cp_unit', None) if len(modules) == 1 else None
            self.cp_units[name] = own if own is not None else \
                CheckpointUnit.from_flag(with_cp, cp_use_reentrant)

    def _checkpoint_steps(self):
        steps, stop = [], 0
        for k, (name, modules, emit) in enumerate(self._links()):
            unit = self.cp_units[name]
            if len(modules) == 1 and getattr(modules[0], 'cp_unit', None) is unit:
                steps.append(chain_step(name, unit, modules[0], modules[0], emit=emit))
            elif len(modules) == 1:
                steps.append(unit_step(name, unit, modules[0], emit=emit))
            else:
                steps.append(unit_step(name, unit, _Modules(modules), modules, emit=emit))
            if emit:
                stop = k + 1
        return chain_and_rest(steps, stop)

    def forward(self, x):
        _, outs = self._run_chain(self._checkpoint_steps()[0], x)
        return tuple(o for o in outs if o is not None)


class _Modules:
    """Several modules run in order as one unit's function (picklable, no new state-dict
    keys)."""

    def __init__(self, modules):
        self.modules = modules

    def __call__(self, x):
        return _run_modules(self.modules, x)
