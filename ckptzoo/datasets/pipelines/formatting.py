"""Turning numpy results into tensors and picking what the model gets (mmdet 2.x names).

mmcv's ``DataContainer`` is not used: images become CHW tensors, boxes and labels tensors, and
``Collect`` puts the image metas in a plain dict under ``'img_metas'``; ``collate`` (in
``ckptzoo.datasets.builder``) knows which keys to stack and which to keep as lists.
"""
from collections.abc import Sequence

import numpy as np
import torch

from ...registry import TRANSFORMS


def to_tensor(data):
    """numpy array, tensor, sequence, int or float -> tensor."""
    if isinstance(data, torch.Tensor):
        return data
    if isinstance(data, np.ndarray):
        return torch.from_numpy(np.ascontiguousarray(data))
    if isinstance(data, Sequence) and not isinstance(data, str):
        return torch.tensor(data)
    if isinstance(data, bool):
        raise TypeError(f'cannot convert a bool to a tensor: {data!r}')
    if isinstance(data, int):
        return torch.LongTensor([data])
    if isinstance(data, float):
        return torch.FloatTensor([data])
    raise TypeError(f'cannot convert {type(data).__name__} to a tensor: {data!r}')


def _img_to_chw(img):
    if img.ndim < 3:
        img = np.expand_dims(img, -1)
    return np.ascontiguousarray(img.transpose(2, 0, 1))


@TRANSFORMS.register_module()
class ToTensor:
    def __init__(self, keys):
        self.keys = keys

    def __call__(self, results):
        for key in self.keys:
            results[key] = to_tensor(results[key])
        return results

    def __repr__(self):
        return f'{self.__class__.__name__}(keys={self.keys})'


@TRANSFORMS.register_module()
class ToDataContainer:
    """mmdet 2.x ``ToDataContainer``: here batches hold plain tensors (no mmcv DataContainer),
    so it only checks that each field's ``key`` is in the results; ``stack`` /
    ``cpu_only`` are accepted for the configs' sake (``collate`` knows which keys stay
    lists)."""

    def __init__(self, fields=(dict(key='img', stack=True), dict(key='gt_bboxes'),
                               dict(key='gt_labels'))):
        for field in fields:
            if not isinstance(field, dict) or 'key' not in field or \
                    set(field) - {'key', 'stack', 'cpu_only', 'padding_value', 'pad_dims'}:
                raise ValueError(f'ToDataContainer fields are dicts with a key (and stack, '
                                 f'cpu_only ...), got {field!r}')
        self.fields = fields

    def __call__(self, results):
        missing = [f['key'] for f in self.fields if f['key'] not in results]
        if missing:
            raise KeyError(f'ToDataContainer: keys {missing} are not in the results')
        return results

    def __repr__(self):
        return f'{self.__class__.__name__}(fields={self.fields})'


@TRANSFORMS.register_module()
class ImageToTensor:
    """HWC array -> CHW tensor, dtype kept (float32 after ``Normalize``)."""

    def __init__(self, keys):
        self.keys = keys

    def __call__(self, results):
        for key in self.keys:
            results[key] = to_tensor(_img_to_chw(results[key]))
        return results

    def __repr__(self):
        return f'{self.__class__.__name__}(keys={self.keys})'


@TRANSFORMS.register_module()
class DefaultFormatBundle:
    """``img`` -> CHW float tensor (uint8 is made float32 when ``img_to_float``);
    ``proposals gt_bboxes gt_bboxes_ignore gt_labels`` -> tensors; ``gt_semantic_seg`` ->
    ``[1, H, W]`` tensor. ``gt_masks`` stay the ``BitmapMasks`` / ``PolygonMasks`` they are:
    mmdet's ``DataContainer(cpu_only=True)`` is this here, as ``collate`` keeps them a list
    (one per image) and ``move_to_device`` moves tensors only, so they stay on the CPU for the
    mask head's targets. Fills default ``pad_shape``, ``scale_factor`` and ``img_norm_cfg``
    so ``Collect`` finds them even without ``Pad``/``Resize``/``Normalize``."""

    def __init__(self, img_to_float=True, pad_val=dict(img=0, masks=0, seg=255)):
        self.img_to_float = img_to_float
        self.pad_val = pad_val

    def __call__(self, results):
        if 'img' in results:
            img = results['img']
            if self.img_to_float and img.dtype == np.uint8:
                img = img.astype(np.float32)
            results.setdefault('pad_shape', img.shape)
            results.setdefault('scale_factor', 1.0)
            channels = 1 if img.ndim < 3 else img.shape[2]
            results.setdefault('img_norm_cfg', dict(mean=np.zeros(channels, dtype=np.float32),
                                                    std=np.ones(channels, dtype=np.float32),
                                                    to_rgb=False))
            results['img'] = to_tensor(_img_to_chw(img))
        for key in ('proposals', 'gt_bboxes', 'gt_bboxes_ignore', 'gt_labels'):
            if key in results:
                results[key] = to_tensor(results[key])
        if 'gt_semantic_seg' in results:
            results['gt_semantic_seg'] = to_tensor(results['gt_semantic_seg'][None, ...].copy())
        return results

    def __repr__(self):
        return f'{self.__class__.__name__}(img_to_float={self.img_to_float})'


DEFAULT_META_KEYS = ('filename', 'ori_filename', 'ori_shape', 'img_shape', 'pad_shape',
                     'scale_factor', 'flip', 'flip_direction', 'img_norm_cfg')


@TRANSFORMS.register_module()
class Collect:
    """Keep ``keys`` and gather ``meta_keys`` into ``results['img_metas']`` (a plain dict)."""

    def __init__(self, keys, meta_keys=DEFAULT_META_KEYS):
        self.keys = keys
        self.meta_keys = meta_keys

    def __call__(self, results):
        missing = [k for k in list(self.keys) + list(self.meta_keys) if k not in results]
        if missing:
            raise KeyError(f'Collect: keys {missing} are not in the results; available: '
                           f'{sorted(results)}')
        data = {'img_metas': {k: results[k] for k in self.meta_keys}}
        for key in self.keys:
            data[key] = results[key]
        return data

    def __repr__(self):
        return f'{self.__class__.__name__}(keys={self.keys}, meta_keys={self.meta_keys})'
