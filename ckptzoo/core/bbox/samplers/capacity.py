"""Sampling at capacity, set on the samplers a model holds (the memory planner's probe).

A sampler that can yield its largest counts declares a class attribute ``at_capacity`` (a
bool, False: :class:`~ckptzoo.core.bbox.samplers.RandomSampler`); the flag is state of each
sampler object, set and restored here, not a switch that every sampler in the process reads.
"""
from typing import Any, Iterator

import torch
import torch.nn as nn

__all__ = ['samplers_of', 'set_sampling_at_capacity', 'restore_sampling_at_capacity']


def _honours(obj):
    return isinstance(getattr(type(obj), 'at_capacity', None), bool)


def _found_in(value, depth=2):
    """The samplers in ``value``: itself, or the items of a list / tuple / dict (a sampler per
    cascade stage), ``depth`` levels down; modules and tensors are not looked into."""
    if isinstance(value, (nn.Module, torch.Tensor)):
        return
    if _honours(value):
        yield value
    elif depth > 0 and isinstance(value, (list, tuple, dict)):
        for item in (value.values() if isinstance(value, dict) else value):
            yield from _found_in(item, depth - 1)


def samplers_of(model: nn.Module) -> Iterator[Any]:
    """Every sampler ``model`` holds, once each: the attributes of its modules (a RoI head's
    ``bbox_sampler``, an RPN head's ``sampler``, lists of them) that honour ``at_capacity``."""
    seen = set()
    for module in model.modules():
        for name, value in vars(module).items():
            if name in ('_parameters', '_buffers', '_modules'):
                continue
            for sampler in _found_in(value):
                if id(sampler) not in seen:
                    seen.add(id(sampler))
                    yield sampler


def set_sampling_at_capacity(model: nn.Module, flag: bool = True) -> list[tuple[Any, bool]]:
    """Set ``at_capacity`` to ``flag`` on every sampler ``model`` holds (see
    :class:`~ckptzoo.core.bbox.samplers.RandomSampler`: while it is True each image yields the
    sampler's largest counts, for measuring memory; training never runs with it). Returns
    ``[(sampler, its previous flag)]`` for :func:`restore_sampling_at_capacity`."""
    states = []
    for sampler in samplers_of(model):
        states.append((sampler, sampler.at_capacity))
        sampler.at_capacity = bool(flag)
    return states


def restore_sampling_at_capacity(states: list[tuple[Any, bool]]) -> None:
    """Give each sampler back the flag :func:`set_sampling_at_capacity` found on it."""
    for sampler, before in states:
        sampler.at_capacity = before
