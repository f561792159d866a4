"""Assembling and orchestrating: assemble a training run from a config (``assemble``), train it
(``train``), plan it under a memory budget (``plan``) and attach its memory hook
(``batch_plans``), the run-wide options (``options``), inference, and the test loops (which live
in :mod:`ckptzoo.runner.test`, where the evaluation hooks run them)."""
from ..runner.test import collect_results, multi_gpu_test, single_gpu_test
from .assemble import (TrainingRun, apply_checkpoint_plan, auto_scale_lr, build_train_datasets,
                       build_train_model, build_training, model_defaults, resolve_device)
from .batch_plans import attach_memory_hook
from .inference import inference_detector, init_detector, show_result_pyplot
from .options import TrainingOptions, select_optimizer_hook
from .plan import PlannedRun, plan_memory, plan_training, planning_requested
from .train import find_latest_checkpoint, prepare_synthetic_data, set_random_seed, train_model

__all__ = ['init_detector', 'inference_detector', 'show_result_pyplot', 'single_gpu_test',
           'multi_gpu_test', 'collect_results', 'find_latest_checkpoint',
           'select_optimizer_hook', 'set_random_seed', 'train_model', 'prepare_synthetic_data',
           'auto_scale_lr', 'apply_checkpoint_plan', 'model_defaults', 'build_train_model',
           'build_train_datasets', 'TrainingRun', 'build_training', 'resolve_device',
           'TrainingOptions', 'planning_requested', 'plan_memory', 'plan_training',
           'PlannedRun', 'attach_memory_hook']
