"""One training step outside the training loop, and its input: what the probe records, the
planner validates a plan with and the timing compares plans by.

The step is the one ``runner.run`` makes (``model.train_step``, then the optimizer hook's
backward, clipping and step); the input is a batch of the run's own loader, padded to the
largest shape the training pipeline can give (:func:`worst_case_shape`).
"""
from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Protocol

import torch
from mmengine.config import Config

from ..runner.hooks.optimizer import OptimizerHook
from ..runner.utils import get_model_device, move_to_device
from .trackers import LiveTensorTracker

__all__ = ['Run', 'train_pipeline', 'worst_case_shape', 'probe_batch', 'optimizer_hook', 'train_step',
           'on_cuda', 'step_tensors', 'measure_step']


class Run(Protocol):
    """What the probe steps use of a training run (:class:`ckptzoo.apis.TrainingRun` is one):
    its runner (model, optimizer, optimizer hook) and its training data loaders."""

    runner: Any
    data_loaders: list


# ------------------------------------------------------------------------------------------
# the input
# ------------------------------------------------------------------------------------------
def train_pipeline(cfg: Any) -> list[dict]:
    """The transforms of the config's training set (``data.train``, or the dataset that a
    ``RepeatDataset`` and friends wrap, the first of a list or a ``ConcatDataset``; else
    ``train_pipeline``); ``[]`` when it has none."""
    train = cfg.data.train
    while True:
        if isinstance(train, (list, tuple)):  # concatenated by build_dataset
            train = train[0] if train else {}
        elif 'pipeline' not in train and 'dataset' in train:  # RepeatDataset and friends
            train = train['dataset']
        elif 'pipeline' not in train and train.get('datasets'):  # ConcatDataset
            train = train['datasets']
        else:
            break
    return list(train.get('pipeline') or cfg.get('train_pipeline') or [])


def worst_case_shape(cfg: Config) -> tuple[int, int] | None:
    """The largest padded ``(H, W)`` the training pipeline can give a batch, or None: the
    former name of :func:`ckptzoo.memory.batch_shapes.pipeline_bound`."""
    from .batch_shapes import pipeline_bound  # batch_shapes reads train_pipeline from here
    return pipeline_bound(cfg)


def probe_batch(run: Run, shape: tuple[int, int] | None = None) -> dict[str, Any]:
    """One batch of the run's training loader, zero-padded to ``shape`` (default
    :func:`worst_case_shape` of the config), on the model's device."""
    batch = next(iter(run.data_loaders[0]))
    img = batch['img']
    if shape is not None:
        h, w = max(shape[0], img.shape[-2]), max(shape[1], img.shape[-1])
        if (h, w) != tuple(img.shape[-2:]):
            padded = img.new_zeros(img.shape[:-2] + (h, w))
            padded[..., :img.shape[-2], :img.shape[-1]] = img
            batch['img'] = padded
            for meta in batch.get('img_metas', []):
                meta['pad_shape'] = (h, w, img.shape[1])
                meta['batch_input_shape'] = (h, w)
    return move_to_device(batch, get_model_device(run.runner.model))


# ------------------------------------------------------------------------------------------
# one step
# ------------------------------------------------------------------------------------------
def optimizer_hook(runner: Any) -> OptimizerHook:
    """The runner's optimizer hook, which makes the backward and the step."""
    for hook in runner.hooks:
        if isinstance(hook, OptimizerHook):
            return hook
    raise RuntimeError('the training run has no optimizer hook')


def train_step(run: Run, batch: dict[str, Any],
               on_forward_end: Callable[[], None] | None = None) -> None:
    """The step ``runner.run`` makes: ``model.train_step`` and the optimizer hook's backward,
    clipping and step; it always steps and divides the loss by ``cumulative_iters``, whatever
    the runner's position (the planner steps outside the training loop)."""
    runner = run.runner
    hook = optimizer_hook(runner)
    runner.outputs = runner.model.train_step(batch, runner.optimizer)
    if on_forward_end is not None:
        on_forward_end()
    hook.backward_and_step(runner, loss_factor=hook.cumulative_iters, step=True)
    runner.outputs = None


def on_cuda(run: Run) -> bool:
    """Whether the run's model is on a CUDA device (memory is read from the allocator)."""
    return get_model_device(run.runner.model).type == 'cuda'


def step_tensors(run: Run, batch: dict[str, Any]) -> tuple:
    """What a step holds from its start: the model, the optimizer (its state), the batch."""
    runner = run.runner
    return (runner.model, runner.optimizer, batch)


def measure_step(run: Run, batch: dict[str, Any]) -> tuple[int, float]:
    """``(peak bytes, seconds)`` of one step with the plan in force: the exact live-tensor
    peak on CPU, ``max_memory_allocated`` on CUDA."""
    if on_cuda(run):
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        t0 = time.perf_counter()
        train_step(run, batch)
        torch.cuda.synchronize()
        return torch.cuda.max_memory_allocated(), time.perf_counter() - t0
    with LiveTensorTracker() as tracker:
        tracker.track(step_tensors(run, batch))
        t0 = time.perf_counter()
        train_step(run, batch)
        seconds = time.perf_counter() - t0
    return tracker.peak_bytes, seconds
