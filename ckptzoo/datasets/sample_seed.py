"""Per-sample random state: a sample's augmentation is a function of (seed, epoch, index).

mmdet 2.x transforms (and users' own) draw from numpy's and Python's global generators, whose
state lives in whichever process runs the pipeline: the trainer (no workers) or a worker
(seeded once at its start). Neither survives a resume, so a resumed run flipped and rescaled
other images than the uninterrupted one. Here the sampler hands out a :class:`SeededIndex`
(an ``int`` carrying ``seed``) and the dataset runs that sample under :func:`sample_rng`:
numpy's, Python's and torch's CPU global generators seeded from it for the sample and restored
afterwards. The draws then depend neither on the number of workers, nor on their persistence,
nor on where a run was resumed, and differ from epoch to epoch. A plain ``int`` index
(``dataset[3]`` in tools and tests) uses the global generators as they are, as mmdet does.
"""
import contextlib
import random

import numpy as np
import torch
import torch.distributed as torch_dist
from mmengine.dist import get_dist_info

__all__ = ['SeededIndex', 'sample_seed', 'worker_seed', 'seed_globals', 'seeded_indices',
           'sample_rng', 'sync_random_seed']

_SAMPLE, _WORKER = 0, 1  # domains of the derived seeds, so the two never coincide


def _derive(*words):
    state = np.random.SeedSequence([int(w) for w in words]).generate_state(2)
    return int(state[0]) << 32 | int(state[1])


def sample_seed(seed, epoch, index):
    """The 64-bit seed of dataset item ``index`` in ``epoch`` of a run seeded with ``seed``
    (``None`` counts as 0, as the samplers' shuffle does)."""
    return _derive(_SAMPLE, 0 if seed is None else seed, epoch, index)


def worker_seed(seed, epoch, rank, worker_id):
    """The seed of a DataLoader worker started for ``epoch`` (see ``worker_init_fn``)."""
    return _derive(_WORKER, seed, epoch, rank, worker_id)


def seed_globals(seed):
    """Seed Python's, numpy's and torch's CPU global generators from one 64-bit seed."""
    random.seed(seed)
    np.random.seed([seed & 0xFFFFFFFF, seed >> 32])
    torch.default_generator.manual_seed(seed)


class SeededIndex(int):
    """A dataset index (it is the ``int``) with the ``seed`` its sample is drawn under."""

    def __new__(cls, index, seed):
        self = super().__new__(cls, index)
        self.seed = seed
        return self

    def __reduce__(self):  # to DataLoader workers
        return SeededIndex, (int(self), self.seed)

    def __repr__(self):
        return f'SeededIndex({int(self)}, seed={self.seed})'


def seeded_indices(indices, seed, epoch):
    """``indices`` (a sampler's order for ``epoch``) as :class:`SeededIndex` items."""
    for index in indices:
        index = int(index)
        yield SeededIndex(index, sample_seed(seed, epoch, index))


@contextlib.contextmanager
def sample_rng(index):
    """Run the body under ``index.seed`` when ``index`` is a :class:`SeededIndex`, restoring
    the global generators afterwards (the trainer's own draws stay undisturbed); a plain int
    changes nothing. Torch's CUDA generators are left alone (transforms run on the CPU)."""
    seed = getattr(index, 'seed', None)
    if seed is None:
        yield
        return
    saved = random.getstate(), np.random.get_state(), torch.default_generator.get_state()
    seed_globals(seed)
    try:
        yield
    finally:
        random.setstate(saved[0])
        np.random.set_state(saved[1])
        torch.default_generator.set_state(saved[2])


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
