"""Dense heads whose pyramid levels are checkpoint units: ``level{i}`` (``bbox_head.level0``,
``rpn_head.level3``, ...), one per level, each covering that level's whole
``forward_single``. The levels are independent, so each is a chain of one step: no segment
spans two levels."""
from ..checkpointing import CheckpointOwnerMixin, CheckpointUnit, unit_step

__all__ = ['LevelUnitsMixin']


class LevelUnitsMixin(CheckpointOwnerMixin):
    """Runs ``forward_single`` of each level through that level's :class:`CheckpointUnit`.

    The head calls :meth:`_init_level_units` at the end of its ``__init__`` (once the prior
    generator knows the number of levels)."""

    def _init_level_units(self, with_cp, cp_use_reentrant, num_levels=None):
        """``with_cp``: ``'full'`` checkpointing of every level (not an mmdet 2.x argument;
        ``set_checkpoint_plan`` changes modes later). ``num_levels``: the prior generator's
        by default (a head without one, e.g. CenterNet's single level, gives it)."""
        if not isinstance(with_cp, bool):
            raise TypeError(f'{type(self).__name__} with_cp must be a bool, got {with_cp!r}')
        if num_levels is None:
            num_levels = self.prior_generator.num_levels
        self.level_units = [CheckpointUnit.from_flag(with_cp, cp_use_reentrant)
                            for _ in range(num_levels)]

    def _level_function(self, level):
        """What level ``level`` runs on its feature map: ``forward_single``, or (heads whose
        levels differ by a ``Scale`` or a stride) a partial of it with that level's
        arguments."""
        return self.forward_single

    def _checkpoint_steps(self):
        return [[unit_step(f'level{i}', unit, self._level_function(i), self)]
                for i, unit in enumerate(self.level_units)]

    def forward(self, feats):
        """Each output of ``forward_single`` as a list over levels (``(cls_scores, bbox_preds)``,
        ``(cls_scores, bbox_preds, centernesses)``, ...), each level through its unit."""
        if len(feats) != len(self.level_units):
            raise ValueError(f'{type(self).__name__} expects {len(self.level_units)} levels '
                             f'(one per anchor stride), got {len(feats)}')
        outs = [unit(self._level_function(i), x, module=self)
                for i, (unit, x) in enumerate(zip(self.level_units, feats))]
        return tuple(list(o) for o in zip(*outs))
