"""The data a memory plan is made on: the config's training set, or, when it is not on disk
yet, a stand-in of synthetic batches at the pipeline's bound shape
(:class:`ckptzoo.datasets.StandInDataset`), so that a budget can be planned before the data
is downloaded. Only the planner falls back: training on a missing dataset stays an error."""
from __future__ import annotations

from typing import Any

import numpy as np
from mmengine.config import Config
from torch.utils.data import Dataset

from ..datasets import StandInDataset, build_dataset
from ..datasets.batch_shapes import pipeline_bound
from ..datasets.train_config import innermost_train, train_pipeline
from ..memory.measure.step import worst_case_shape
from .options import samples_per_gpu_of

__all__ = ['planning_datasets', 'stand_in_dataset', 'without_missing_weights']

#: ground-truth boxes per synthetic image when none are asked for (COCO's max_per_img)
DEFAULT_BOXES = 100


def planning_datasets(cfg: Config, boxes_per_image: int = DEFAULT_BOXES
                      ) -> tuple[list[Dataset], str | None]:
    """``([training set], None)``, or, when building it fails because a file it reads is
    missing, ``([stand-in], note)``: the note is one line naming the missing path and the
    synthetic batches planned on. Only the training set is built (the probe steps on its
    loader)."""
    try:
        return [build_dataset(cfg.data.train)], None
    except FileNotFoundError as exc:
        missing = f'{exc.filename} not found' if exc.filename else str(exc)
        stand_in = stand_in_dataset(cfg, boxes_per_image, missing)
    shapes = ' and '.join(f'{h}x{w}' for h, w in stand_in.shapes)
    if len(stand_in.shapes) > 1:
        shapes += ' (one orientation per batch, as GroupSampler batches them)'
    boxes = '' if stand_in.boxes_per_image is None else \
        f' with {stand_in.boxes_per_image} boxes per image'
    return [stand_in], (f'the training data is not on disk ({missing}): planning '
                        f'on synthetic batches of {shapes}{boxes} at samples_per_gpu='
                        f'{samples_per_gpu_of(cfg)}')


def _num_classes(cfg: Config, train: Any) -> int | None:
    model = cfg.model
    for head in (model.get('bbox_head'), (model.get('roi_head') or {}).get('bbox_head'),
                 model.get('head')):
        if isinstance(head, dict) and isinstance(head.get('num_classes'), int):
            return head['num_classes']
    classes = train.get('classes') if isinstance(train, dict) else None
    return len(classes) if isinstance(classes, (list, tuple)) and classes else None


def _resize_hint(cfg):
    """``, e.g. --cfg-options data.train.pipeline.2.img_scale=...`` for the config's Resize."""
    path, train = innermost_train(cfg)
    for i, t in enumerate((train.get('pipeline') or []) if isinstance(train, dict) else []):
        if t.get('type') == 'Resize':
            return f', e.g. --cfg-options {path}.pipeline.{i}.img_scale="(1333,800)"'
    return ''


def stand_in_dataset(cfg: Config, boxes_per_image: int = DEFAULT_BOXES,
                     missing: str = 'the training set not found') -> StandInDataset:
    """The stand-in for ``cfg``'s training set: samples as its pipeline's ``Collect`` gives
    them (a classification set's when it has no pipeline), at :func:`worst_case_shape`, with
    ``boxes_per_image`` boxes (a detector's) and the model's number of classes. ``missing``
    says what was not found, for the errors."""
    train = innermost_train(cfg)[1]
    pipeline = train_pipeline(cfg)
    collect = next((t for t in reversed(pipeline) if t.get('type') == 'Collect'), None)
    keys = list(collect['keys']) if collect is not None else None
    if keys is not None and 'gt_bboxes' in keys:
        task = 'detection'
    elif (keys is None and not pipeline and 'head' in cfg.model) or \
            (keys is not None and 'gt_label' in keys):
        task = 'classification'
    else:
        raise ValueError(f'the training data is not on disk ({missing}), and the stand-in '
                         'makes synthetic batches only for detectors (Collect keys with '
                         'gt_bboxes) and classifiers: '
                         f'got Collect keys {keys} and model {cfg.model.get("type")!r}')
    shape = worst_case_shape(cfg)
    if shape is None and task == 'classification' and isinstance(
            train.get('img_size') if isinstance(train, dict) else None, int):
        shape = (train['img_size'], train['img_size'])
    if shape is None:
        raise ValueError(f'the training data is not on disk ({missing}), and the training '
                         'pipeline gives no bound on the image size to plan synthetic batches '
                         'at: give it a Resize with an img_scale (or a crop with a size)'
                         + _resize_hint(cfg))
    if task == 'detection':  # GroupSampler batches each orientation apart (never long x long)
        oriented = [pipeline_bound(cfg, o) for o in ('landscape', 'portrait')]
        if None not in oriented and len(set(oriented)) == 2:
            shape = oriented
    num_classes = _num_classes(cfg, train)
    if num_classes is None:
        raise ValueError(f'the training data is not on disk ({missing}), and neither the '
                         'model (bbox_head.num_classes / head.num_classes) nor '
                         'data.train.classes '
                         'gives the number of classes to label synthetic boxes with')
    norm = next((t for t in pipeline if t.get('type') == 'Normalize'), None)
    norm_cfg = None if norm is None else dict(
        mean=np.array(norm['mean'], dtype=np.float32),
        std=np.array(norm['std'], dtype=np.float32), to_rgb=norm.get('to_rgb', True))
    extra = {} if collect is None or 'meta_keys' not in collect else \
        dict(meta_keys=collect['meta_keys'])
    classes = train.get('classes') if isinstance(train, dict) else None
    load = next((t for t in pipeline if t.get('type') == 'LoadAnnotations'), None)
    if load is not None and load.get('with_mask', False):  # the masks' kind, as loaded
        extra['poly2mask'] = load.get('poly2mask', True)
    num_samples = samples_per_gpu_of(cfg) * (len(shape) if isinstance(shape, list) else 1)
    return StandInDataset(shape, num_classes, num_samples=num_samples, task=task,
                          boxes_per_image=boxes_per_image, keys=keys, img_norm_cfg=norm_cfg,
                          classes=classes if isinstance(classes, (list, tuple)) else None,
                          seed=cfg.get('seed') or 0, **extra)


def without_missing_weights(cfg: Config) -> list[str]:
    """Drop from ``cfg.model`` (in place) the pretrained weights whose file is not here
    (``init_cfg=dict(type='Pretrained', checkpoint=...)``, ``pretrained=PATH``): weights do not
    change memory, so a plan needs none of them. Returns one line per weight dropped, naming
    where it was and the file."""
    from ..runner.checkpoint import resolve_checkpoint_path
    dropped = []

    def missing(checkpoint):
        try:
            resolve_checkpoint_path(checkpoint)
        except (FileNotFoundError, TypeError) as exc:
            return str(exc)
        return None

    def walk(node, path):
        if isinstance(node, dict):
            init = node.get('init_cfg')
            if isinstance(init, dict) and init.get('type') == 'Pretrained' \
                    and init.get('checkpoint') is not None:
                why = missing(init['checkpoint'])
                if why is not None:
                    node['init_cfg'] = None
                    dropped.append(f'{path}.init_cfg: {why}')
            if isinstance(node.get('pretrained'), str):
                why = missing(node['pretrained'])
                if why is not None:
                    node['pretrained'] = None
                    dropped.append(f'{path}.pretrained: {why}')
            for key, value in node.items():
                walk(value, f'{path}.{key}')
        elif isinstance(node, (list, tuple)):
            for i, value in enumerate(node):
                walk(value, f'{path}[{i}]')

    walk(cfg.model, 'model')
    return dropped
