"""Activation checkpointing: the wrapper and its modes (:mod:`.functional`), the units and the
plan a model owns (:mod:`.plan`), segments of several units (:mod:`.segments`), observers of
unit calls and recomputes (:mod:`.observers`). Named so it cannot be confused with checkpoint
files (:mod:`ckptzoo.runner.checkpoint`)."""
from .functional import (MODES, check_mode, checkpoint, checkpoint_sequential,  # noqa: F401
                         per_stage_flags, selective_policy, should_checkpoint)
from .derived import DerivedUnits, derive_checkpoint_units, derived_units  # noqa: F401
from .observers import CheckpointObserver, observe  # noqa: F401
from .plan import (CheckpointOwnerMixin, CheckpointUnit, reentrant_units,  # noqa: F401
                   resolve_plan, resolve_segments)
from .segments import ChainStep, chain_and_rest, chain_step, run_chain, unit_step  # noqa: F401

__all__ = ['MODES', 'check_mode', 'checkpoint', 'checkpoint_sequential', 'per_stage_flags',
           'selective_policy', 'should_checkpoint', 'CheckpointObserver', 'observe',
           'CheckpointOwnerMixin', 'CheckpointUnit', 'reentrant_units', 'resolve_plan',
           'resolve_segments', 'ChainStep', 'chain_and_rest', 'chain_step', 'run_chain',
           'unit_step', 'DerivedUnits', 'derive_checkpoint_units', 'derived_units']
