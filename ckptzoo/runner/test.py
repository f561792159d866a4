"""Run a model over a test data loader and collect its per-sample results (mmcv 1.x's
``mmcv.engine.test``, with mmdet 2.x's drawing): the runner's evaluation hooks run it during
training, ``tools/test.py`` (through :mod:`ckptzoo.apis`) after it."""
import os.path as osp

import numpy as np
import torch
import torch.distributed as dist

from ..core.mask import encode_mask_results
from .dist_utils import get_dist_info
from .utils import get_model_device, move_to_device, unwrap_model

__all__ = ['single_gpu_test', 'multi_gpu_test', 'collect_results', 'show_batch_results']


def _progress_bar(total, rank):
    if rank != 0:
        return None
    try:
        from mmengine.utils import ProgressBar
    except ImportError:  # the bar is a nicety
        return None
    return ProgressBar(total)


def _run(model, data_loader, bar_total, rank, world_size, on_batch=None):
    """Results of this process, the model left in the train/eval mode it was in."""
    was_training = model.training
    model.eval()
    device = get_model_device(model)
    results = []
    bar = _progress_bar(bar_total, rank)
    try:
        for data in data_loader:
            with torch.no_grad():
                result = model(return_loss=False, rescale=True, **move_to_device(data, device))
            if on_batch is not None:
                on_batch(data, result)
            results.extend(_encoded(result))
            if bar is not None:
                for _ in range(len(result) * world_size):
                    bar.update()
    finally:
        model.train(was_training)
    return results


def _encoded(result):
    """Instance masks kept as COCO RLE (mmdet's test loops keep these, not the full-image
    bitmaps); drawing sees the bitmaps first."""
    return [(r[0], encode_mask_results(r[1])) if isinstance(r, tuple) else r for r in result]


def single_gpu_test(model, data_loader, show=False, out_dir=None, show_score_thr=0.3):
    """``model(return_loss=False, rescale=True, **batch)`` on every batch, under no_grad.

    The model returns a list per batch (one result per image); the lists are concatenated.
    Unlike mmcv, the model is put back into training mode if it was in it, so an evaluation in
    the middle of an epoch does not leave the rest of the epoch in eval mode. ``show`` /
    ``out_dir``: draw each image's detections scoring above ``show_score_thr`` (see
    :func:`show_batch_results`).
    """
    def draw(data, result):
        show_batch_results(model, data, result, show=show, out_dir=out_dir,
                           score_thr=show_score_thr)

    return _run(model, data_loader, len(data_loader.dataset), 0, 1,
                draw if show or out_dir else None)


def _original_image(img, meta):
    """The image as read from disk; without a file, the network input de-normalised, cropped
    to ``img_shape`` and resized to ``ori_shape`` (mmdet's way)."""
    from ..datasets.pipelines.loading import imread
    if meta.get('filename'):
        return imread(meta['filename'])
    import cv2
    h, w = meta['img_shape'][:2]
    norm = meta.get('img_norm_cfg', dict(mean=np.zeros(3), std=np.ones(3), to_rgb=False))
    arr = img.detach().float().cpu().numpy().transpose(1, 2, 0)[:h, :w]
    arr = arr * np.asarray(norm['std']) + np.asarray(norm['mean'])
    if norm.get('to_rgb'):
        arr = arr[..., ::-1]
    arr = np.clip(arr, 0, 255).astype(np.uint8)
    ori_h, ori_w = meta['ori_shape'][:2]
    return cv2.resize(np.ascontiguousarray(arr), (ori_w, ori_h))


def show_batch_results(model, data, results, show=False, out_dir=None, score_thr=0.3):
    """Draw ``results`` (one per image of the batch ``data``) with ``model.show_result`` on
    the original images, written to ``out_dir/<ori_filename>`` (mmdet's layout)."""
    inner = unwrap_model(model)
    imgs, metas = data['img'], data['img_metas']
    if isinstance(imgs, (list, tuple)):  # test-time augmentation: the first one
        imgs, metas = imgs[0], metas[0]
    for img, meta, result in zip(imgs, metas, results):
        out_file = None
        if out_dir:
            name = meta.get('ori_filename') or osp.basename(meta.get('filename') or '')
            if not name:
                raise ValueError('cannot name the drawn image: its img_metas have no '
                                 'ori_filename or filename (add them to Collect meta_keys)')
            out_file = osp.join(out_dir, name)
        inner.show_result(_original_image(img, meta), result, show=show, out_file=out_file,
                          score_thr=score_thr)


def collect_results(result_part, size):
    """All ranks' results in dataset order (rank-interleaved, as DistributedSampler deals them
    out), trimmed to ``size`` to drop the samples the sampler repeated to pad the last round."""
    rank, world_size = get_dist_info()
    if world_size == 1:
        return list(result_part)[:size]
    parts = [None] * world_size
    dist.all_gather_object(parts, list(result_part))
    ordered = []
    for i in range(max(len(p) for p in parts)):
        for part in parts:
            if i < len(part):
                ordered.append(part[i])
    return ordered[:size]


def multi_gpu_test(model, data_loader, tmpdir=None, gpu_collect=False):
    """Each rank tests its share of the data (its DistributedSampler); the results of all ranks
    are gathered with ``torch.distributed.all_gather_object`` and returned on every rank.

    ``tmpdir`` and ``gpu_collect`` are accepted for mmcv's signature; no temporary files are
    written. With the NCCL backend, ``torch.cuda.set_device`` must have been called (as the
    launcher does).
    """
    rank, world_size = get_dist_info()
    size = len(data_loader.dataset)
    results = _run(model, data_loader, size, rank, world_size)
    return collect_results(results, size)
