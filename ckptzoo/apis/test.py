"""Run a model over a test data loader and collect its per-sample results (mmdet 2.x apis)."""
import torch
import torch.distributed as dist

from ..runner.utils import get_model_device, move_to_device

__all__ = ['single_gpu_test', 'multi_gpu_test', 'collect_results']


def _dist_info():
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def _progress_bar(total, rank):
    if rank != 0:
        return None
    try:
        from mmengine.utils import ProgressBar
    except ImportError:  # the bar is a nicety
        return None
    return ProgressBar(total)


def _run(model, data_loader, bar_total, rank, world_size):
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
            results.extend(result)
            if bar is not None:
                for _ in range(len(result) * world_size):
                    bar.update()
    finally:
        model.train(was_training)
    return results


def single_gpu_test(model, data_loader):
    """``model(return_loss=False, rescale=True, **batch)`` on every batch, under no_grad.

    The model returns a list per batch (one result per image); the lists are concatenated.
    Unlike mmcv, the model is put back into training mode if it was in it, so an evaluation in
    the middle of an epoch does not leave the rest of the epoch in eval mode.
    """
    return _run(model, data_loader, len(data_loader.dataset), 0, 1)


def collect_results(result_part, size):
    """All ranks' results in dataset order (rank-interleaved, as DistributedSampler deals them
    out), trimmed to ``size`` to drop the samples the sampler repeated to pad the last round."""
    rank, world_size = _dist_info()
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
    rank, world_size = _dist_info()
    size = len(data_loader.dataset)
    results = _run(model, data_loader, size, rank, world_size)
    return collect_results(results, size)
