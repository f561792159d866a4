"""Level units for heads whose levels have their own layers (SSD, YOLOv3): the same units as
:class:`LevelUnitsMixin` (``level{i}``, one per level, each a chain of one step), but each
level runs ``forward_single(x, level)`` with its index. A subclass of the mixin rather than a
change to it, so that the shared module stays as it is."""
from functools import partial

from ..checkpointing import unit_step
from .level_units import LevelUnitsMixin

__all__ = ['IndexedLevelUnitsMixin']


class IndexedLevelUnitsMixin(LevelUnitsMixin):
    """:class:`LevelUnitsMixin` whose ``forward_single`` takes ``(x, level)``."""

    def _level_forward(self, level, x):
        return self.forward_single(x, level)

    def _checkpoint_steps(self):
        return [[unit_step(f'level{i}', unit, partial(self._level_forward, i), self)]
                for i, unit in enumerate(self.level_units)]

    def forward(self, feats):
        if len(feats) != len(self.level_units):
            raise ValueError(f'{type(self).__name__} expects {len(self.level_units)} levels '
                             f'(one per anchor stride), got {len(feats)}')
        outs = [unit(partial(self._level_forward, i), x, module=self)
                for i, (unit, x) in enumerate(zip(self.level_units, feats))]
        return tuple(list(o) for o in zip(*outs))
