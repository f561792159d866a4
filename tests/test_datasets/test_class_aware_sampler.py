"""ClassAwareSampler (mmdet 2.28's): the order mmdet gives on the same dataset and seed
(computed by mmdet 2.28.2 on this fixture), seeded indices so resume is exact, and the
data loader's ``class_aware_sampler`` (mmdet's ``data.train_dataloader`` key)."""
import os.path as osp

import pytest

from ckptzoo.datasets import (ClassAwareSampler, LVISV1Dataset, build_dataloader,
                              generate_coco_variant)
from ckptzoo.datasets.sample_seed import SeededIndex, sample_seed

# mmdet 2.28.2's ClassAwareSampler(ds, 2, num_replicas, rank, seed=5, num_sample_class)
MMDET_1_1_0_EPOCH0 = [26, 22, 18, 10, 13, 20, 17, 1, 10, 20, 22, 24, 12, 12, 14, 21, 7, 15, 11,
                      4, 8, 7, 4, 24, 9, 1, 5, 6]
MMDET_2_2_1_EPOCH3 = [19, 20, 9, 3, 11, 22, 0, 10, 2, 4, 10, 15, 5, 24]


@pytest.fixture(scope='module')
def dataset(tmp_path_factory):
    root = generate_coco_variant(str(tmp_path_factory.mktemp('cas') / 'lvis'), 'lvis_v1',
                                 num_train=40, num_val=4)
    return LVISV1Dataset(ann_file=osp.join(root, 'annotations', 'lvis_v1_train.json'),
                         img_prefix=root + '/', pipeline=[])


def test_order_equals_mmdet(dataset):
    assert len(dataset) == 27
    sampler = ClassAwareSampler(dataset, 2, 1, 0, seed=5, num_sample_class=1)
    assert [int(i) for i in sampler] == MMDET_1_1_0_EPOCH0 and len(sampler) == 28
    sampler = ClassAwareSampler(dataset, 2, 2, 1, seed=5, num_sample_class=2)
    sampler.set_epoch(3)
    assert [int(i) for i in sampler] == MMDET_2_2_1_EPOCH3 and len(sampler) == 14


def test_indices_carry_their_seeds_and_repeat_on_resume(dataset):
    a = ClassAwareSampler(dataset, 2, 1, 0, seed=7)
    a.set_epoch(2)
    first = list(a)
    assert all(isinstance(i, SeededIndex) and i.seed == sample_seed(7, 2, int(i)) for i in first)
    b = ClassAwareSampler(dataset, 2, 1, 0, seed=7)  # a resumed run's sampler
    b.set_epoch(2)
    assert [(int(i), i.seed) for i in b] == [(int(i), i.seed) for i in first]
    a.set_epoch(3)
    assert [int(i) for i in a] != [int(i) for i in first]


def test_every_class_is_drawn_evenly(dataset):
    sampler = ClassAwareSampler(dataset, 1, 1, 0, seed=0)
    cat2imgs = dataset.get_cat2imgs()
    valid = [c for c, imgs in cat2imgs.items() if imgs]
    assert len(valid) == 3
    drawn = list(sampler)
    assert len(drawn) == len(dataset)


def test_build_dataloader_class_aware_sampler(dataset):
    loader = build_dataloader(dataset, 2, 0, seed=5, class_aware_sampler=dict(num_sample_class=1))
    assert isinstance(loader.sampler, ClassAwareSampler)
    assert [int(i) for i in loader.sampler] == MMDET_1_1_0_EPOCH0
    with pytest.raises(ValueError, match='num_sample_class'):
        build_dataloader(dataset, 2, 0, class_aware_sampler=dict(num_sample_class=0))
    with pytest.raises(ValueError, match='class_aware_sampler'):
        build_dataloader(dataset, 2, 0, class_aware_sampler=dict(bad=1))
