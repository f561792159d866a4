"""What every backbone shares (mmcls's ``BaseBackbone``, timm's ``set_grad_checkpointing``):
checkpoint units, their per-stage ``with_cp`` flags and the ``with_cp`` attribute that reads
them back, frozen stages, ``norm_eval`` and the ``out_indices`` / ``frozen_stages`` checks."""
import torch.nn as nn
from torch.nn.modules.batchnorm import _BatchNorm

from ..checkpointing import CheckpointOwnerMixin, per_stage_flags

__all__ = ['BaseBackbone']


class BaseBackbone(CheckpointOwnerMixin, nn.Module):
    """Subclasses set ``frozen_stages`` / ``norm_eval``, describe their units
    (``_checkpoint_steps``) and list their frozen modules (``_frozen_modules``), and call
    :meth:`_freeze_stages` at the end of ``__init__``."""

    frozen_stages = -1
    norm_eval = False

    @property
    def with_cp(self):
        """mmdet's attribute, read from the modes in force (so it follows
        ``set_checkpoint_plan``): True when every checkpoint unit of the backbone is
        checkpointed, in any mode, as ``with_cp=True`` makes them ('full'); a block's
        ``with_cp`` reads its own unit the same way. Per unit: ``checkpoint_plan()``."""
        units = self.checkpoint_units().values()
        return bool(units) and all(unit.mode is not None for unit in units)

    @with_cp.setter
    def with_cp(self, value):
        raise AttributeError(
            f'{type(self).__name__}.with_cp reads the checkpoint units\' modes and cannot be '
            f'set (got {value!r}): give with_cp to the constructor, or change the modes with '
            "set_checkpoint_plan({'*': 'full'}) (None for plain)")

    @staticmethod
    def _stage_flags(with_cp, num, unit='stage'):
        """``with_cp`` (bool or one bool per ``unit``) as a tuple of ``num`` bools."""
        return per_stage_flags(with_cp, num, 'with_cp', unit)

    @staticmethod
    def _check_out_indices(out_indices, num, unit='stage', units=None, negative=False):
        """``out_indices`` (an int or a sequence) as a sorted tuple of indices in ``0..num-1``;
        with ``negative``, ``-num..-1`` count from the end."""
        indices = (out_indices, ) if isinstance(out_indices, int) else tuple(out_indices)
        low = -num if negative else 0
        if not indices or any(isinstance(i, bool) or not isinstance(i, int)
                              or not low <= i < num for i in indices):
            raise ValueError(f'out_indices must be {unit} indices in {low}..{num - 1} '
                             f'({num} {units or unit + "s"}), got {out_indices!r}')
        return tuple(sorted({i % num for i in indices}))

    @staticmethod
    def _check_frozen_stages(frozen_stages, num):
        if isinstance(frozen_stages, bool) or not isinstance(frozen_stages, int) \
                or not -1 <= frozen_stages <= num:
            raise ValueError(f'frozen_stages must be an int in -1..{num}, '
                             f'got {frozen_stages!r}')
        return frozen_stages

    def _frozen_modules(self):
        """The modules ``frozen_stages`` freezes (eval mode, no gradient)."""
        return []

    def _freeze_stages(self):
        for m in self._frozen_modules():
            m.eval()
            for p in m.parameters():
                p.requires_grad = False

    def train(self, mode=True):
        """As ``nn.Module.train``, keeping frozen stages in eval mode and, with ``norm_eval``,
        every BatchNorm (whose affine transform then saves nothing when it is not trained:
        see :mod:`ckptzoo.models.utils.norm`)."""
        super().train(mode)
        self._freeze_stages()
        if mode and self.norm_eval:
            for m in self.modules():
                if isinstance(m, _BatchNorm):
                    m.eval()
        return self
