"""One training step outside the training loop, and its input: what the probe records, the
planner validates a plan with and the timing compares plans by.

The step is the one ``runner.run`` makes (``model.train_step``, then the optimizer hook's
backward, clipping and step); the input is a batch of the run's own loader, padded or cropped
to a shape (the largest the training pipeline can give: :func:`worst_case_shape`) and, for a
detector, given a number of ground-truth boxes per image (:func:`probe_batch`).
"""
from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Protocol

import numpy as np
import torch
from mmengine.config import Config

from ...runner.hooks.optimizer import OptimizerHook
from ...runner.utils import cuda_device, get_model_device, move_to_device
from ...core.mask import BitmapMasks, PolygonMasks
from ...utils.model_wrapper import unwrap_model
from ...utils.nested import iter_tensors
from .peak_meter import PeakMeter

__all__ = ['Run', 'worst_case_shape', 'probe_batch', 'optimizer_hook',
           'train_step', 'hold_window_gradients', 'make_optimizer_state', 'on_cuda',
           'step_tensors', 'optimizer_state_bytes']


class Run(Protocol):
    """What the probe steps use of a training run (:class:`ckptzoo.apis.TrainingRun` is one):
    its runner (model, optimizer, optimizer hook) and its training data loaders."""

    runner: Any
    data_loaders: list


# ------------------------------------------------------------------------------------------
# the input
# ------------------------------------------------------------------------------------------
def worst_case_shape(cfg: Config) -> tuple[int, int] | None:
    """The largest padded ``(H, W)`` the training pipeline can give a batch, or None: the
    former name of :func:`ckptzoo.datasets.batch_shapes.pipeline_bound`."""
    from ...datasets.batch_shapes import pipeline_bound
    return pipeline_bound(cfg)


def probe_batch(run: Run, shape: tuple[int, int] | None = None,
                boxes_per_image: int | None = None, seed: int = 0) -> dict[str, Any]:
    """One batch of the run's training loader, of exactly ``shape`` (default: the loader's
    own), on the model's device.

    A smaller batch is zero-padded, a larger one cropped (each image's ``img_shape`` cut to
    the crop; ``gt_bboxes`` and ``gt_bboxes_ignore`` clipped to it, those left without area
    dropped); every image's ``pad_shape`` and ``batch_input_shape`` become ``shape``.
    ``boxes_per_image`` (a detection batch, with ``gt_bboxes``) gives every image exactly that
    many ground-truth boxes: its own first, then boxes drawn from a generator seeded with
    ``seed`` (the run's random states are not touched), so that the probe measures what grows
    with the boxes (the assigner's IoU matrix of priors x boxes, the targets) at the count
    asked for. A classification batch has no boxes and ignores it. A batch with ``gt_masks``
    (a mask model's) keeps one mask per box: each image's own masks cut or padded to
    ``shape`` along with its boxes, a drawn box's mask the box filled (of the kind the loader
    gives, bitmaps or polygons), so the mask targets cost what they cost in training.
    """
    if boxes_per_image is not None and (isinstance(boxes_per_image, bool) or
                                        not isinstance(boxes_per_image, int) or
                                        boxes_per_image < 1):
        raise ValueError(f'boxes_per_image must be a positive int, got {boxes_per_image!r}')
    batch = next(iter(run.data_loaders[0]))
    if shape is not None:
        _fit_shape(batch, (int(shape[0]), int(shape[1])))
    if boxes_per_image is not None and 'gt_bboxes' in batch:
        _fill_boxes(batch, boxes_per_image, _num_classes(run, batch),
                    torch.Generator().manual_seed(seed))
    if batch.get('gt_masks') is not None and 'gt_bboxes' in batch:
        _fit_masks(batch)
    return move_to_device(batch, get_model_device(run.runner.model))


def _fit_shape(batch, shape):
    """Pad / crop ``batch['img']`` to ``shape`` in place, the metas and boxes along."""
    img = batch['img']
    h, w = shape
    if (h, w) != tuple(img.shape[-2:]):
        fitted = img.new_zeros(img.shape[:-2] + (h, w))
        ch, cw = min(h, img.shape[-2]), min(w, img.shape[-1])
        fitted[..., :ch, :cw] = img[..., :ch, :cw]
        batch['img'] = fitted
        _fit_semantic_seg(batch, img.shape[-2:], (h, w))
    for meta in batch.get('img_metas', []):
        if 'img_shape' in meta:
            ih, iw = meta['img_shape'][:2]
            meta['img_shape'] = (min(ih, h), min(iw, w)) + tuple(meta['img_shape'][2:])
        meta['pad_shape'] = (h, w, img.shape[1])
        meta['batch_input_shape'] = (h, w)
    if h < img.shape[-2] or w < img.shape[-1]:
        for boxes_key, labels_key in (('gt_bboxes', 'gt_labels'),
                                      ('gt_bboxes_ignore', 'gt_labels_ignore')):
            for i, boxes in enumerate(batch.get(boxes_key) or []):
                if boxes is None:
                    continue
                clipped = boxes.clone()
                clipped[:, 0::2] = clipped[:, 0::2].clamp(0, w)
                clipped[:, 1::2] = clipped[:, 1::2].clamp(0, h)
                keep = (clipped[:, 2] > clipped[:, 0]) & (clipped[:, 3] > clipped[:, 1])
                batch[boxes_key][i] = clipped[keep]
                if batch.get(labels_key) is not None and batch[labels_key][i] is not None:
                    batch[labels_key][i] = batch[labels_key][i][keep]
                if boxes_key == 'gt_bboxes' and batch.get('gt_masks') is not None:
                    batch['gt_masks'][i] = batch['gt_masks'][i][keep.cpu().numpy()]


def _fit_semantic_seg(batch, img_hw, shape):
    """A full-resolution ``gt_semantic_seg`` (N, 1, H, W) (the panoptic models') padded with
    the ignore label 255 / cropped along with the image; a map of another size (HTC's 1/8
    one) is left as it is."""
    seg = batch.get('gt_semantic_seg')
    if not isinstance(seg, torch.Tensor) or tuple(seg.shape[-2:]) != tuple(img_hw):
        return
    h, w = shape
    fitted = seg.new_full(seg.shape[:-2] + (h, w), 255)
    ch, cw = min(h, seg.shape[-2]), min(w, seg.shape[-1])
    fitted[..., :ch, :cw] = seg[..., :ch, :cw]
    batch['gt_semantic_seg'] = fitted


def _fit_masks(batch):
    """Every image's ``gt_masks`` to the batch's padded ``(H, W)``, one per ``gt_bboxes`` row:
    its own masks (already cut to the kept boxes) first, cropped / padded to the shape, then
    the drawn boxes filled."""
    h, w = batch['img'].shape[-2:]
    window = np.array([0, 0, w, h])
    for i, boxes in enumerate(batch['gt_bboxes']):
        masks = batch['gt_masks'][i]
        own = min(len(masks), boxes.shape[0])
        masks = masks[np.arange(own)]
        if (masks.height, masks.width) != (h, w):
            masks = masks.crop(window).pad((h, w))
        drawn = boxes[own:].detach().cpu().numpy()
        if isinstance(masks, PolygonMasks):
            masks = PolygonMasks(masks.masks + [[np.array([x1, y1, x2, y1, x2, y2, x1, y2],
                                                          dtype=np.float64)]
                                                for x1, y1, x2, y2 in drawn], h, w)
        else:
            filled = np.zeros((len(drawn), h, w), dtype=np.uint8)
            for k, (x1, y1, x2, y2) in enumerate(np.round(drawn).astype(np.int64)):
                filled[k, y1:y2, x1:x2] = 1
            masks = BitmapMasks(np.concatenate([masks.to_ndarray().astype(np.uint8), filled]),
                                h, w)
        batch['gt_masks'][i] = masks


def _num_classes(run, batch):
    """The model's number of classes (its head's), else the dataset's ``CLASSES``."""
    model = unwrap_model(run.runner.model)
    heads = [getattr(model, 'bbox_head', None),
             getattr(getattr(model, 'roi_head', None), 'bbox_head', None), model]
    for head in heads:
        if isinstance(getattr(head, 'num_classes', None), int):
            return head.num_classes
    classes = getattr(run.data_loaders[0].dataset, 'CLASSES', None)
    if classes:
        return len(classes)
    raise ValueError(f'cannot tell the number of classes of {type(model).__name__} (no '
                     'bbox_head.num_classes) nor of the training set (no CLASSES): the '
                     'probe cannot draw labels for padding boxes')


def _fill_boxes(batch, count, num_classes, gen):
    """Every image's ``gt_bboxes`` / ``gt_labels`` to exactly ``count``: its own first, then
    boxes of 1/16 to 1/2 of the image's sides placed inside it, labels uniform over the
    classes."""
    metas = batch.get('img_metas') or [{}] * len(batch['gt_bboxes'])
    all_labels = batch.get('gt_labels') or [None] * len(batch['gt_bboxes'])  # RPN: none
    for i, boxes in enumerate(batch['gt_bboxes']):
        labels = all_labels[i]
        boxes = boxes[:count]
        labels = None if labels is None else labels[:count]
        extra = count - boxes.shape[0]
        if extra > 0:
            h, w = (metas[i].get('img_shape') or batch['img'].shape[-2:])[:2]
            size = torch.rand(extra, 2, generator=gen) * (15 / 32) + 1 / 16
            bw, bh = size[:, 0] * w, size[:, 1] * h
            x1 = torch.rand(extra, generator=gen) * (w - bw)
            y1 = torch.rand(extra, generator=gen) * (h - bh)
            drawn = torch.stack([x1, y1, x1 + bw, y1 + bh], dim=1)
            boxes = torch.cat([boxes, drawn.to(boxes.dtype)])
            drawn_labels = torch.randint(num_classes, (extra, ), generator=gen)
            labels = None if labels is None else torch.cat([labels,
                                                            drawn_labels.to(labels.dtype)])
        batch['gt_bboxes'][i] = boxes
        if labels is not None:
            batch['gt_labels'][i] = labels


# ------------------------------------------------------------------------------------------
# one step
# ------------------------------------------------------------------------------------------
def optimizer_hook(runner: Any) -> OptimizerHook:
    """The runner's optimizer hook, which makes the backward and the step."""
    for hook in runner.hooks:
        if isinstance(hook, OptimizerHook):
            return hook
    raise RuntimeError('the training run has no optimizer hook')


def hold_window_gradients(run: Run) -> None:
    """Give every trainable parameter without a gradient a zero one when the run accumulates
    (``cumulative_iters`` > 1).

    Every iteration of an accumulation window after its first starts with the gradients of
    those before it and adds its own into them (in place); the last also makes the optimizer
    step. That iteration is the window's largest (the first holds no gradients in its forward
    and steals its new gradients instead of adding them), so it is the one to probe and
    validate. A parameter that training leaves without a gradient (unused) is held too: an
    over-estimate only."""
    if optimizer_hook(run.runner).cumulative_iters <= 1:
        return
    for p in unwrap_model(run.runner.model).parameters():
        if p.requires_grad and p.grad is None:
            p.grad = torch.zeros_like(p)


def train_step(run: Run, batch: dict[str, Any],
               on_forward_end: Callable[[], None] | None = None) -> None:
    """The step ``runner.run`` makes at its largest iteration: ``model.train_step`` and the
    optimizer hook's backward, clipping and step; it always steps and divides the loss by
    ``cumulative_iters``, whatever the runner's position (the planner steps outside the
    training loop). With ``cumulative_iters`` > 1 it is a window's last iteration: the
    gradients are held from its start (:func:`hold_window_gradients`, allocated first thing,
    so a measurement around the step counts them)."""
    runner = run.runner
    hook = optimizer_hook(runner)
    hold_window_gradients(run)
    runner.outputs = runner.model.train_step(batch, runner.optimizer)
    if on_forward_end is not None:
        on_forward_end()
    hook.backward_and_step(runner, loss_factor=hook.cumulative_iters, step=True)
    runner.outputs = None


def on_cuda(run: Run) -> bool:
    """Whether the run's model is on a CUDA device (memory is read from the allocator):
    :func:`~ckptzoo.runner.utils.cuda_device` of its model."""
    return cuda_device(run.runner.model) is not None


def step_tensors(run: Run, batch: dict[str, Any]) -> tuple:
    """What a step holds from its start: the model, the optimizer (its state), the batch."""
    runner = run.runner
    return (runner.model, runner.optimizer, batch)


def optimizer_state_bytes(optimizer: torch.optim.Optimizer) -> int:
    """Bytes of the optimizer's state tensors (each storage once): what a run's first
    optimizer step makes and every later step holds from its start."""
    seen = {}
    for t in iter_tensors(list(optimizer.state.values())):
        s = t.untyped_storage()
        seen[s.data_ptr()] = s.nbytes()
    return sum(seen.values())


def make_optimizer_state(run: Run) -> int:
    """Make the optimizer's state (momentum buffers, Adam's moments) when it has none, with a
    plain optimizer step on zero gradients, and return its bytes.

    Every step of a run after its first optimizer step holds that state from its start. A
    probe that counted on its own step to make it would miss it whenever the loss scaler skips
    that step (inf gradients are common in a float16 run's first steps), and plan a budget
    that the run breaks from its first real step on. The weights it moves (weight decay) are
    restored by the caller, as after any probe step (:class:`ckptzoo.apis.plan.ProbeSession`).
    """
    optimizer = run.runner.optimizer
    if not optimizer.state:
        params = [p for group in optimizer.param_groups for p in group['params']
                  if p.requires_grad]
        grads = [p.grad for p in params]  # a window's gradients stay as they were
        for p in params:
            p.grad = torch.zeros_like(p)
        optimizer.step()
        for p, grad in zip(params, grads):
            p.grad = grad
    return optimizer_state_bytes(optimizer)
