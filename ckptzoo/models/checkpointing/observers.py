"""Observers: a public way to watch checkpoint units run, without patching any class.

The memory probe (:mod:`ckptzoo.memory.measure.probe`) needs to see every call of a checkpoint unit
(live bytes and time at its start and end) and every recompute of a checkpointed region in
backward. :func:`observe` registers a :class:`CheckpointObserver` for the duration of a
``with`` block; :class:`~.plan.CheckpointUnit` and the recompute of
:func:`~.functional.checkpoint` call the registered observers around their work. With none
registered (training) the cost is one test of an empty list per call.
"""
from contextlib import contextmanager
from functools import partial
from typing import Any, Callable, Iterator, Sequence

__all__ = ['CheckpointObserver', 'observe', 'observed']

_observers = []


class CheckpointObserver:
    """Around-advice for checkpoint units; override either method. Each must call ``run()``
    exactly once and return what it returns (the observed call's result)."""

    def unit_call(self, run: Callable[[], Any], unit: Any, function: Callable,
                  args: Sequence, module: Any) -> Any:
        """A call ``unit(function, *args, module=module)``: ``run()`` runs it, plainly or
        under the unit's mode."""
        return run()

    def region_call(self, run: Callable[[], Any], region: object, recomputing: bool) -> Any:
        """A call of the function a checkpoint runs: once in forward (``recomputing`` False),
        again for each recompute in backward (True). ``region`` is the same object in both, so
        an observer can tell which forward a recompute repeats."""
        return run()


@contextmanager
def observe(observer: CheckpointObserver) -> Iterator[CheckpointObserver]:
    """Call ``observer`` around every unit call and checkpointed region inside the block
    (in every thread); observers registered earlier wrap later ones."""
    _observers.append(observer)
    try:
        yield observer
    finally:
        _observers.remove(observer)


def observed(method: str, run: Callable[[], Any], *context: Any) -> Any:
    """``run()`` inside every registered observer's ``method`` (``'unit_call'`` or
    ``'region_call'``), the first registered outermost. Callers in this package test
    ``_observers`` first, so that nothing is built while no observer is registered."""
    for observer in reversed(_observers):
        run = partial(getattr(observer, method), run, *context)
    return run()
