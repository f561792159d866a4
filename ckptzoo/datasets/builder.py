"""Building datasets and data loaders as mmdet 2.x, without mmcv's DataContainer.

``build_dataset`` follows mmdet 2.x: ``RepeatDataset``/``ConcatDataset`` configs build their
inner datasets, a list of configs is concatenated, and a dataset config whose ``ann_file`` is a
list becomes a ``ConcatDataset`` of one dataset per file (``img_prefix``, ``seg_prefix`` and
``proposal_file`` lists are split alongside) - this is the one way lists of annotation files
are handled, for every dataset type (VOC07+12 gives one ``VOCDataset`` per year, each
evaluated with its own AP rule).

``collate`` makes the batch the detectors take::

    train: dict(img=Tensor[B, 3, H, W],            # padded to the largest H and W
                img_metas=[dict, ...],             # B dicts
                gt_bboxes=[Tensor[n_i, 4], ...], gt_labels=[Tensor[n_i], ...], ...)
    test (MultiScaleFlipAug): dict(img=[Tensor[B, 3, H, W] per augmentation],
                                   img_metas=[[dict] * B per augmentation])
"""
import copy
import math
from functools import partial

import numpy as np
import torch
import torch.distributed as torch_dist
import torch.nn.functional as F
from mmengine.dist import get_dist_info
from torch.utils.data import DataLoader, Sampler
from torch.utils.data import DistributedSampler as _TorchDistributedSampler
from torch.utils.data.dataloader import default_collate

from ..registry import build_dataset as _registry_build
from .dataset_wrappers import (ClassBalancedDataset, ConcatDataset, MultiImageMixDataset,
                               RepeatDataset)
from .sample_seed import seed_globals, seeded_indices, worker_seed

#: Per-image keys kept as lists in a batch (their sizes differ from image to image).
LIST_KEYS = ('img_metas', 'gt_bboxes', 'gt_labels', 'gt_bboxes_ignore', 'gt_labels_ignore',
             'proposals', 'gt_masks')
#: Image keys padded (bottom/right) to the largest size in the batch, then stacked.
PAD_KEYS = ('img', 'gt_semantic_seg')


def _concat_dataset(cfg, default_args=None):
    ann_files = cfg['ann_file']
    split = {}
    for key in ('img_prefix', 'seg_prefix', 'proposal_file'):
        value = cfg.get(key, None)
        if isinstance(value, (list, tuple)):
            if len(value) != len(ann_files):
                raise ValueError(f'{key} has {len(value)} entries but ann_file has '
                                 f'{len(ann_files)}: {value!r} vs {ann_files!r}')
            split[key] = value
    datasets = []
    for i, ann_file in enumerate(ann_files):
        data_cfg = copy.deepcopy(dict(cfg))
        data_cfg.pop('separate_eval', None)
        data_cfg['ann_file'] = ann_file
        for key, values in split.items():
            data_cfg[key] = values[i]
        datasets.append(build_dataset(data_cfg, default_args))
    return ConcatDataset(datasets, cfg.get('separate_eval', True))


def build_dataset(cfg, default_args=None):
    """A dataset from a config (see the module docstring for wrappers and list ann_files)."""
    if isinstance(cfg, (list, tuple)):
        return ConcatDataset([build_dataset(c, default_args) for c in cfg])
    if not isinstance(cfg, dict):
        raise TypeError(f'a dataset config must be a dict or a list of dicts, got {cfg!r}')
    if 'type' not in cfg:
        raise KeyError(f'a dataset config needs a "type" key, got keys {sorted(cfg)}')
    if cfg['type'] in ('ConcatDataset', ConcatDataset):
        return ConcatDataset([build_dataset(c, default_args) for c in cfg['datasets']],
                             cfg.get('separate_eval', True))
    if cfg['type'] in ('RepeatDataset', RepeatDataset):
        return RepeatDataset(build_dataset(cfg['dataset'], default_args), cfg['times'])
    if cfg['type'] in ('ClassBalancedDataset', ClassBalancedDataset):
        return ClassBalancedDataset(build_dataset(cfg['dataset'], default_args),
                                    cfg['oversample_thr'], cfg.get('filter_empty_gt', True))
    if cfg['type'] in ('MultiImageMixDataset', MultiImageMixDataset):
        args = {k: v for k, v in cfg.items() if k != 'type'}
        return MultiImageMixDataset(build_dataset(args.pop('dataset'), default_args), **args)
    if isinstance(cfg.get('ann_file'), (list, tuple)):
        return _concat_dataset(cfg, default_args)
    return _registry_build(cfg, default_args)


def _pad_stack(tensors, pad_value=0, size_divisor=None):
    """Pad the last two dims (bottom/right) to the largest in the list (rounded up to
    ``size_divisor``), then stack."""
    if not all(isinstance(t, torch.Tensor) for t in tensors):
        raise TypeError(f'expected tensors to stack, got {[type(t).__name__ for t in tensors]}')
    ndims = {t.dim() for t in tensors}
    if len(ndims) != 1:
        raise ValueError(f'cannot stack tensors of different ranks {sorted(ndims)}')
    shapes = [tuple(t.shape) for t in tensors]
    if len(set(shapes)) == 1 and not size_divisor or len(shapes[0]) < 2:
        return torch.stack(tensors)  # nothing to pad (or not an image)
    if len({s[:-2] for s in shapes}) != 1:
        raise ValueError(f'tensors differ outside their last two dims: {shapes}')
    max_h = max(s[-2] for s in shapes)
    max_w = max(s[-1] for s in shapes)
    if size_divisor:
        max_h = int(math.ceil(max_h / size_divisor)) * size_divisor
        max_w = int(math.ceil(max_w / size_divisor)) * size_divisor
    padded = [t if t.shape[-2:] == (max_h, max_w) else
              F.pad(t, (0, max_w - t.shape[-1], 0, max_h - t.shape[-2]), value=pad_value)
              for t in tensors]
    return torch.stack(padded)


def collate(batch, samples_per_gpu=1, size_divisor=None, pad_value=0):
    """List of pipeline outputs -> one batch (see the module docstring).

    ``img`` is padded with ``pad_value`` (``gt_semantic_seg`` with 255) to the largest height
    and width in the batch (rounded up to ``size_divisor`` if given; ``Pad`` usually did that
    per image already). ``img_metas`` and per-image annotations stay lists. Values that are
    lists (one entry per test-time augmentation) are collated per augmentation. Anything else
    goes through torch's ``default_collate``. ``samples_per_gpu`` is accepted for mmdet's
    signature; the whole batch is padded together.
    """
    if not isinstance(batch, (list, tuple)) or not batch:
        raise TypeError(f'collate needs a non-empty list of samples, got {batch!r}')
    if not isinstance(batch[0], dict):
        return default_collate(batch)
    out = {}
    for key in batch[0]:
        values = [sample[key] for sample in batch]
        if isinstance(values[0], list):
            # test-time augmentation: one entry per augmentation
            num_augs = len(values[0])
            out[key] = [_collate_key(key, [v[a] for v in values], size_divisor, pad_value)
                        for a in range(num_augs)]
        else:
            out[key] = _collate_key(key, values, size_divisor, pad_value)
    return out


def _collate_key(key, values, size_divisor, pad_value):
    if key in LIST_KEYS:
        return list(values)
    if key in PAD_KEYS and isinstance(values[0], torch.Tensor):
        return _pad_stack(values, 255 if key == 'gt_semantic_seg' else pad_value, size_divisor)
    return default_collate(values)


def sync_random_seed(seed=None):
    """Rank 0's ``seed`` on every rank (mmdet 2.x's ``sync_random_seed``): the distributed
    samplers shuffle with it, so the ranks cut one order into disjoint parts even when their
    seeds differ (``--diff-seed``). A collective under torch.distributed; ``None`` counts as 0,
    as in the samplers (mmdet drew a random seed)."""
    seed = 0 if seed is None else seed
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise TypeError(f'seed must be an int or None, got {seed!r}')
    rank, world_size = get_dist_info()
    if world_size == 1:
        return int(seed)
    device = 'cpu'
    if torch_dist.get_backend() == 'nccl':
        device = torch.device('cuda', torch.cuda.current_device())
    value = torch.tensor(int(seed) if rank == 0 else 0, dtype=torch.int64, device=device)
    torch_dist.broadcast(value, src=0)
    return int(value.item())


class GroupSampler(Sampler):
    """Shuffled indices where every run of ``samples_per_gpu`` shares the aspect-ratio group
    (``dataset.flag``), so padding wastes little; each group is padded with random repeats to a
    multiple of ``samples_per_gpu`` (mmdet 2.x).

    Unlike mmdet (global numpy RNG) the order depends only on ``seed + epoch`` (``set_epoch``),
    so a resumed run sees the same batches as the uninterrupted one; each index carries its
    sample's seed (:mod:`.sample_seed`), so it sees the same augmentations too."""

    def __init__(self, dataset, samples_per_gpu=1, seed=0):
        if not hasattr(dataset, 'flag'):
            raise TypeError(f'GroupSampler needs a dataset with a group "flag", '
                            f'{type(dataset).__name__} has none')
        self.dataset = dataset
        self.samples_per_gpu = samples_per_gpu
        self.flag = np.asarray(dataset.flag).astype(np.int64)
        self.group_sizes = np.bincount(self.flag)
        self.num_samples = sum(int(np.ceil(size / samples_per_gpu)) * samples_per_gpu
                               for size in self.group_sizes)
        self.epoch = 0
        self.seed = seed if seed is not None else 0

    def __iter__(self):
        rng = np.random.default_rng(self.seed + self.epoch)
        indices = []
        for i, size in enumerate(self.group_sizes):
            if size == 0:
                continue
            indice = np.where(self.flag == i)[0]
            rng.shuffle(indice)
            num_extra = int(np.ceil(size / self.samples_per_gpu)) * self.samples_per_gpu - size
            indices.append(np.concatenate([indice, rng.choice(indice, num_extra)]))
        indices = np.concatenate(indices)
        chunks = [indices[i * self.samples_per_gpu:(i + 1) * self.samples_per_gpu]
                  for i in rng.permutation(len(indices) // self.samples_per_gpu)]
        indices = np.concatenate(chunks).astype(np.int64).tolist()
        return seeded_indices(indices, self.seed, self.epoch)

    def __len__(self):
        return self.num_samples

    def set_epoch(self, epoch):
        self.epoch = epoch


class DistributedGroupSampler(Sampler):
    """``GroupSampler`` for one of ``num_replicas`` processes: each gets ``num_samples``
    indices, groups padded by repetition; the order depends on ``seed + epoch``
    (``set_epoch``) so it is the same on every process and changes each epoch; indices carry
    their samples' seeds as in ``GroupSampler``.

    Fix over mmdet 2.x: the seed is rank 0's (:func:`sync_random_seed`, which mmdet applies to
    its ``DistributedSampler`` only): with ``--diff-seed`` mmdet's ranks shuffled differently
    and saw overlapping samples, some twice and others never."""

    def __init__(self, dataset, samples_per_gpu=1, num_replicas=None, rank=None, seed=0):
        _rank, _world = get_dist_info()
        self.num_replicas = _world if num_replicas is None else num_replicas
        self.rank = _rank if rank is None else rank
        if not 0 <= self.rank < self.num_replicas:
            raise ValueError(f'rank must be in [0, {self.num_replicas}), got {self.rank}')
        if not hasattr(dataset, 'flag'):
            raise TypeError(f'DistributedGroupSampler needs a dataset with a group "flag", '
                            f'{type(dataset).__name__} has none')
        self.dataset = dataset
        self.samples_per_gpu = samples_per_gpu
        self.epoch = 0
        self.seed = (sync_random_seed(seed) if self.num_replicas > 1 else
                     seed if seed is not None else 0)
        self.flag = np.asarray(dataset.flag).astype(np.int64)
        self.group_sizes = np.bincount(self.flag)
        self.num_samples = sum(
            int(math.ceil(size / samples_per_gpu / self.num_replicas)) * samples_per_gpu
            for size in self.group_sizes)
        self.total_size = self.num_samples * self.num_replicas

    def __iter__(self):
        g = torch.Generator()
        g.manual_seed(self.epoch + self.seed)
        indices = []
        for i, size in enumerate(self.group_sizes):
            if size == 0:
                continue
            indice = np.where(self.flag == i)[0]
            indice = indice[torch.randperm(int(size), generator=g).numpy()].tolist()
            extra = (int(math.ceil(size / self.samples_per_gpu / self.num_replicas)) *
                     self.samples_per_gpu * self.num_replicas - len(indice))
            tmp = list(indice)
            for _ in range(extra // size):
                indice.extend(tmp)
            indice.extend(tmp[:extra % size])
            indices.extend(indice)
        n = self.samples_per_gpu
        indices = [indices[j] for i in torch.randperm(len(indices) // n, generator=g).tolist()
                   for j in range(i * n, (i + 1) * n)]
        offset = self.num_samples * self.rank
        return seeded_indices(indices[offset:offset + self.num_samples], self.seed, self.epoch)

    def __len__(self):
        return self.num_samples

    def set_epoch(self, epoch):
        self.epoch = epoch


class DistributedSampler(_TorchDistributedSampler):
    """torch's ``DistributedSampler`` (the same order) whose indices carry their samples' seeds
    (:mod:`.sample_seed`), as mmdet 2.x's subclass of the same name is torch's with a seed:
    rank 0's (:func:`sync_random_seed`), so that the ranks' parts never overlap."""

    def __init__(self, dataset, num_replicas=None, rank=None, shuffle=True, seed=0,
                 drop_last=False):
        super().__init__(dataset, num_replicas, rank, shuffle, seed, drop_last)
        if self.num_replicas > 1:  # a one-replica sampler (not distributed) needs no peers
            self.seed = sync_random_seed(seed)

    def __iter__(self):
        return seeded_indices(super().__iter__(), self.seed, self.epoch)


def worker_init_fn(worker_id, num_workers, rank, seed, sampler=None):
    """Seeds numpy / random / torch in a worker from ``(seed, epoch, rank, worker_id)``; the
    epoch is ``sampler.epoch`` when the worker starts.

    mmdet 2.x seeds with ``num_workers * rank + worker_id + seed``: non-persistent workers,
    started anew each epoch, then repeat the previous epoch's random draws. Datasets that take
    seeded indices do not depend on this (their samples draw from their own seeds); it is for
    randomness outside them (a user's dataset that ignores the index's seed). ``num_workers``
    is kept for mmdet's signature.
    """
    del num_workers
    epoch = getattr(sampler, 'epoch', 0)
    seed_globals(worker_seed(seed, epoch, rank, worker_id))


def _empty_reasons(dataset):
    """The ``empty_reason`` of an empty dataset, or of the parts of an empty wrapper."""
    if getattr(dataset, 'empty_reason', None):
        return [dataset.empty_reason]
    parts = getattr(dataset, 'datasets', None) or [getattr(dataset, 'dataset', None)]
    return [r for part in parts if part is not None for r in _empty_reasons(part)]


def _no_object_reasons(dataset):
    """The ``no_objects_reason`` of each part of a training set none of whose parts has a box
    to train on ([] when one part has, or cannot tell)."""
    if hasattr(dataset, 'data_infos'):
        reason = getattr(dataset, 'no_objects_reason', None)
        return [reason] if reason else []
    parts = getattr(dataset, 'datasets', None) or [getattr(dataset, 'dataset', None)]
    reasons = [_no_object_reasons(part) for part in parts if part is not None]
    return [r for rs in reasons for r in rs] if reasons and all(reasons) else []


def build_dataloader(dataset, samples_per_gpu, workers_per_gpu, num_gpus=1, dist=False,
                     shuffle=True, seed=None, drop_last=False, persistent_workers=False,
                     class_aware_sampler=None, **kwargs):
    """mmdet 2.x ``build_dataloader``.

    Not distributed: batch ``num_gpus * samples_per_gpu``, ``GroupSampler`` when shuffling
    (a one-replica ``DistributedSampler`` when the dataset has no group ``flag``, e.g.
    test-mode or classification datasets), in order otherwise (a one-replica
    ``DistributedSampler(shuffle=False)``); both shuffle by
    ``seed + epoch`` only, so a resumed run continues with the same batches. Every sampler made
    here hands out indices carrying their samples' seeds (:mod:`.sample_seed`; ``seed=None``
    counts as 0), so the augmentations of a resumed run are those of the uninterrupted one and
    do not depend on the workers. Distributed (rank and world size from
    ``torch.distributed``): batch ``samples_per_gpu``, ``DistributedGroupSampler`` when
    shuffling (``DistributedSampler(shuffle=True)`` without a flag), else
    ``DistributedSampler(shuffle=False)``; both shuffle (and seed samples) with rank 0's
    ``seed``, so the ranks' parts are disjoint also when their seeds differ (``--diff-seed``:
    what differs per rank is the model's randomness, dropout, drawn from the trainer's
    generators). Call ``loader.sampler.set_epoch(epoch)`` each epoch (the
    ``DistSamplerSeedHook`` does). With ``seed``, each worker is seeded by ``worker_init_fn``
    (from this rank's ``seed``). Each loader has a torch generator of its own (seeded with
    ``seed``, else with torch's initial seed), from which starting an iteration over it draws
    (workers' base seeds): iterating, as an evaluation or a resumed run does, leaves the
    trainer's torch generator (dropout) untouched.
    ``persistent_workers`` only applies when there are workers. ``class_aware_sampler``
    (a dict, e.g. ``dict(num_sample_class=1)``, as mmdet 2.28's configs set it in
    ``data.train_dataloader``) samples with :class:`.ClassAwareSampler`, distributed or not,
    seeded as the others.
    """
    if len(dataset) == 0:  # the samplers would fail with "need at least one array ..."
        raise ValueError(' '.join(_empty_reasons(dataset)) or
                         f'cannot build a data loader over an empty dataset ({dataset!r})')
    no_objects = _no_object_reasons(dataset)  # trains on nothing: every box loss 0
    if no_objects:
        raise ValueError(' '.join(no_objects))
    rank, world_size = get_dist_info()
    if class_aware_sampler is not None:
        from .class_aware_sampler import ClassAwareSampler
        if not isinstance(class_aware_sampler, dict) or \
                set(class_aware_sampler) - {'num_sample_class'}:
            raise ValueError(f'class_aware_sampler must be a dict with at most '
                             f'num_sample_class, got {class_aware_sampler!r}')
        batch_size, num_workers = ((samples_per_gpu, workers_per_gpu) if dist else
                                   (num_gpus * samples_per_gpu, num_gpus * workers_per_gpu))
        sampler = ClassAwareSampler(dataset, samples_per_gpu, world_size if dist else 1,
                                    rank if dist else 0, seed=seed if seed is not None else 0,
                                    **class_aware_sampler)
    elif dist:
        batch_size, num_workers = samples_per_gpu, workers_per_gpu
        has_flag = hasattr(dataset, 'flag')
        if shuffle and has_flag:
            sampler = DistributedGroupSampler(dataset, samples_per_gpu, world_size, rank,
                                              seed=seed)
        else:
            sampler = DistributedSampler(dataset, world_size, rank, shuffle=shuffle,
                                         seed=seed if seed is not None else 0)
    else:
        batch_size, num_workers = num_gpus * samples_per_gpu, num_gpus * workers_per_gpu
        if shuffle:  # orders that depend on seed + epoch only: exact resume
            sampler = (GroupSampler(dataset, samples_per_gpu, seed=seed)
                       if hasattr(dataset, 'flag') else
                       DistributedSampler(dataset, 1, 0, shuffle=True,
                                          seed=seed if seed is not None else 0))
        else:
            sampler = DistributedSampler(dataset, 1, 0, shuffle=False,  # in order, seeded
                                         seed=seed if seed is not None else 0)
    init_fn = (partial(worker_init_fn, num_workers=num_workers, rank=rank, seed=seed,
                       sampler=sampler) if seed is not None else None)
    if num_workers > 0:
        kwargs['persistent_workers'] = persistent_workers
    # each iter(loader) draws the workers' base seed: from the loader's own generator, not
    # from the trainer's (a resumed run would draw there once more than the uninterrupted one)
    kwargs.setdefault('generator', torch.Generator().manual_seed(
        seed if seed is not None else torch.initial_seed()))
    return DataLoader(dataset, batch_size=batch_size, sampler=sampler, num_workers=num_workers,
                      collate_fn=partial(collate, samples_per_gpu=samples_per_gpu),
                      pin_memory=kwargs.pop('pin_memory', False), worker_init_fn=init_fn,
                      drop_last=drop_last, **kwargs)


__all__ = ['build_dataset', 'build_dataloader', 'collate', 'GroupSampler',
           'DistributedGroupSampler', 'DistributedSampler', 'worker_init_fn', 'sync_random_seed']
