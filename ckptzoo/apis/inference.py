"""mmdet 2.x's high-level inference API: build a detector from a config and a checkpoint, run
it on image files or arrays, draw the result."""
from __future__ import annotations

import copy
import os
import warnings

import numpy as np
import torch
import torch.nn as nn
from mmengine.config import Config

from ..datasets.builder import collate
from ..datasets.pipelines import Compose
from ..registry import build_model
from ..runner.checkpoint import load_checkpoint
from ..runner.hooks.rfsearch import rfnext_init_model
from ..runner.utils import get_model_device, move_to_device, unwrap_model
from ..utils.config_file import building_from
from .config import load_config

__all__ = ['init_detector', 'inference_detector', 'show_result_pyplot']


def init_detector(config: str | os.PathLike | Config, checkpoint: str | None = None,
                  device: str | None = None,
                  cfg_options: dict | None = None) -> nn.Module:
    """A detector in eval mode from ``config`` (a path or a ``Config``) and ``checkpoint``.

    ``device`` defaults to ``'cuda:0'`` when CUDA is available, else ``'cpu'`` (mmdet's
    default is always ``'cuda:0'``). Class names come from the checkpoint's
    ``meta['CLASSES']``, else from ``data.test.classes`` of the config. The config is kept as
    ``model.cfg`` for :func:`inference_detector`. Every tensor of the model must come from the
    checkpoint (mmdet loads non-strictly, so a checkpoint of another class count ran with a
    randomly initialised head): a missing key or another shape raises ``CheckpointMismatch``.
    """
    if isinstance(config, (str, os.PathLike)):
        config = load_config(os.fspath(config))
    elif not isinstance(config, Config):
        raise TypeError(f'config must be a filename or a Config, got {type(config).__name__}')
    config = copy.deepcopy(config)
    if cfg_options is not None:
        config.merge_from_dict(cfg_options)
    model_cfg = config.model
    if 'pretrained' in model_cfg:
        model_cfg.pretrained = None
    if isinstance(model_cfg.get('backbone'), dict) and 'init_cfg' in model_cfg.backbone:
        model_cfg.backbone.init_cfg = None  # the checkpoint holds the weights
    model_cfg.train_cfg = None
    defaults = None
    if config.get('test_cfg') is not None and model_cfg.get('test_cfg') is None:
        defaults = dict(test_cfg=config.test_cfg)
    with building_from(config.filename):
        model = build_model(model_cfg, default_args=defaults)
    rfnext_init_model(model, config)  # an RFSearchHook's layers, so its checkpoint loads
    classes = None
    if checkpoint is not None:
        ckpt = load_checkpoint(model, checkpoint, map_location='cpu', complete=True)
        classes = ckpt.get('meta', {}).get('CLASSES')
    if not classes:
        classes = config.get('data', {}).get('test', {}).get('classes')
        if not classes:
            warnings.warn('no class names in the checkpoint meta nor in data.test.classes: '
                          'labels are drawn as class indices')
    model.CLASSES = tuple(classes) if classes else None
    model.cfg = config
    if device is None:
        device = 'cuda:0' if torch.cuda.is_available() else 'cpu'
    model.to(device)
    model.eval()
    return model


def inference_detector(model: nn.Module, imgs: str | os.PathLike | np.ndarray | list | tuple
                       ) -> list[np.ndarray] | list[list[np.ndarray]]:
    """Detections of one image (a path or a BGR array) or of a list of them.

    Returns, per image, a list over classes of ``(k, 5)`` float32 arrays (x1, y1, x2, y2,
    score) in the image's pixels; one such list for one image, a list of them for a list.
    """
    is_batch = isinstance(imgs, (list, tuple))
    if not is_batch:
        imgs = [imgs]
    if not imgs:
        raise ValueError('inference_detector needs at least one image')
    cfg = getattr(model, 'cfg', None)
    if cfg is None:
        raise ValueError('the model has no cfg: build it with init_detector (or set model.cfg '
                         'to its config)')
    pipeline = copy.deepcopy(list(cfg.data.test.pipeline))
    arrays = [isinstance(img, np.ndarray) for img in imgs]
    if any(arrays) and not all(arrays):
        raise TypeError('imgs must be all paths or all arrays, not a mix')
    if all(arrays):
        pipeline[0] = dict(pipeline[0], type='LoadImageFromWebcam')
    else:
        for img in imgs:
            if not isinstance(img, (str, os.PathLike)):
                raise TypeError(f'an image must be a path or a BGR array, got {type(img)}')
    test_pipeline = Compose(pipeline)
    datas = []
    for img in imgs:
        if isinstance(img, np.ndarray):
            data = dict(img=img)
        else:
            data = dict(img_info=dict(filename=os.fspath(img)), img_prefix=None)
        datas.append(test_pipeline(data))
    data = move_to_device(collate(datas, samples_per_gpu=len(imgs)), get_model_device(model))
    with torch.no_grad():
        results = model(return_loss=False, rescale=True, **data)
    return results if is_batch else results[0]


def show_result_pyplot(model: nn.Module, img: str | np.ndarray, result: list[np.ndarray],
                       score_thr: float = 0.3, title: str = 'result', wait_time: float = 0,
                       palette: str | tuple | None = None,
                       out_file: str | None = None) -> np.ndarray | None:
    """mmdet 2.x: draw and show (or write to ``out_file``) ``result`` on ``img``; returns
    what ``model.show_result`` returns."""
    model = unwrap_model(model)
    return model.show_result(img, result, score_thr=score_thr, show=out_file is None,
                             wait_time=wait_time, win_name=title, bbox_color=palette,
                             out_file=out_file)
