"""``ClassAwareSampler`` (mmdet 2.28's, ``data.train_dataloader.class_aware_sampler`` in its
configs): each draw picks a class in a shuffled cycle over the classes that have images, then
``num_sample_class`` images of that class in a shuffled cycle over its images, so rare classes
are seen as often as frequent ones; an epoch has as many samples as the dataset.

The order is a function of ``seed + epoch`` alone (a torch generator, as mmdet's), the same on
every rank (rank 0's seed), each rank taking its slice; the indices carry their samples' seeds
(:mod:`.sample_seed`), so a resumed run draws the same images with the same augmentations as
the uninterrupted one.
"""
import math

import torch
from torch.utils.data import Sampler

from mmengine.dist import get_dist_info
from .sample_seed import seeded_indices


def cat2imgs(dataset):
    """``{label: [dataset indices of the images holding it]}`` over ``CLASSES`` (mmdet's
    ``get_cat2imgs``), from the dataset's own ``get_cat2imgs`` or its ``get_cat_ids``."""
    if hasattr(dataset, 'get_cat2imgs'):
        return dataset.get_cat2imgs()
    classes = getattr(dataset, 'CLASSES', None)
    if classes is None or not hasattr(dataset, 'get_cat_ids'):
        raise TypeError(f'ClassAwareSampler needs a dataset with CLASSES and get_cat_ids (or '
                        f'get_cat2imgs), {type(dataset).__name__} has not')
    out = {i: [] for i in range(len(classes))}
    for i in range(len(dataset)):
        for label in set(dataset.get_cat_ids(i)):
            out[label].append(i)
    return out


class _RandomCycle:
    """``data`` in a random order, reshuffled each time it has all been given."""

    def __init__(self, data, generator):
        self.data, self.generator = list(data), generator
        self.order, self.i = torch.randperm(len(self.data), generator=generator).tolist(), 0

    def __next__(self):
        if self.i == len(self.data):
            self.order = torch.randperm(len(self.data), generator=self.generator).tolist()
            self.i = 0
        self.i += 1
        return self.data[self.order[self.i - 1]]


class ClassAwareSampler(Sampler):
    """mmdet 2.28's arguments: ``(dataset, samples_per_gpu=1, num_replicas=None, rank=None,
    seed=0, num_sample_class=1)``."""

    def __init__(self, dataset, samples_per_gpu=1, num_replicas=None, rank=None, seed=0,
                 num_sample_class=1):
        from .builder import sync_random_seed
        _rank, _world = get_dist_info()
        self.num_replicas = _world if num_replicas is None else num_replicas
        self.rank = _rank if rank is None else rank
        if not 0 <= self.rank < self.num_replicas:
            raise ValueError(f'rank must be in [0, {self.num_replicas}), got {self.rank}')
        if isinstance(num_sample_class, bool) or not isinstance(num_sample_class, int) \
                or num_sample_class < 1:
            raise ValueError(f'num_sample_class must be a positive int, got '
                             f'{num_sample_class!r}')
        self.dataset = dataset
        self.samples_per_gpu = samples_per_gpu
        self.num_sample_class = num_sample_class
        self.epoch = 0
        self.seed = (sync_random_seed(seed) if self.num_replicas > 1 else
                     seed if seed is not None else 0)
        self.cat_dict = cat2imgs(dataset)
        self.valid_cat_inds = [c for c, imgs in self.cat_dict.items() if imgs]
        if not self.valid_cat_inds:
            raise ValueError(f'ClassAwareSampler: no image of {type(dataset).__name__} holds '
                             f'an object of its classes; there is nothing to sample')
        self.num_classes = len(self.valid_cat_inds)
        self.num_samples = int(math.ceil(len(dataset) / self.num_replicas /
                                         samples_per_gpu)) * samples_per_gpu
        self.total_size = self.num_samples * self.num_replicas

    def __iter__(self):
        g = torch.Generator()
        g.manual_seed(self.epoch + self.seed)
        classes = _RandomCycle(self.valid_cat_inds, g)
        images = {c: _RandomCycle(self.cat_dict[c], g) for c in self.valid_cat_inds}
        num_bins = int(math.ceil(self.total_size / self.num_classes / self.num_sample_class))
        indices = []
        for _ in range(num_bins):
            for _ in range(self.num_classes):
                c = next(classes)
                indices.extend(next(images[c]) for _ in range(self.num_sample_class))
        indices = indices[:self.total_size]
        indices += indices[:self.total_size - len(indices)]
        offset = self.num_samples * self.rank
        return seeded_indices(indices[offset:offset + self.num_samples], self.seed, self.epoch)

    def __len__(self):
        return self.num_samples

    def set_epoch(self, epoch):
        self.epoch = epoch
