import os
import socket

import numpy as np
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.utils.data import DistributedSampler

from ckptzoo.datasets import (ConcatDataset, DistributedGroupSampler, GroupSampler,
                              RepeatDataset, build_dataloader, build_dataset, sample_seed,
                              sync_random_seed)
from ckptzoo.registry import DATASETS


class _Toy:
    """A dataset with a group flag; items are their own index."""

    CLASSES = ('a',)

    def __init__(self, flag):
        self.flag = np.array(flag, dtype=np.uint8)

    def __len__(self):
        return len(self.flag)

    def __getitem__(self, i):
        return dict(img=torch.full((3, 4, 4), float(i)), img_metas=dict(idx=i),
                    gt_bboxes=torch.zeros(i % 3, 4), gt_labels=torch.zeros(i % 3,
                                                                           dtype=torch.long))


def test_wrappers_registered_and_build_from_configs():
    for name in ('RepeatDataset', 'ConcatDataset', 'VOCDataset', 'XMLDataset', 'CustomDataset'):
        assert DATASETS.get(name) is not None, name
    toy = _Toy([0, 1, 1])
    rep = RepeatDataset(toy, 3)
    assert len(rep) == 9 and rep[7]['img_metas']['idx'] == 1
    np.testing.assert_array_equal(rep.flag, [0, 1, 1] * 3)
    cat = ConcatDataset([toy, _Toy([1, 0])])
    assert len(cat) == 5 and cat[4]['img_metas']['idx'] == 1
    np.testing.assert_array_equal(cat.flag, [0, 1, 1, 1, 0])
    with pytest.raises(ValueError, match='times'):
        RepeatDataset(toy, 0)


def test_group_sampler_batches_share_a_group():
    flag = [0] * 5 + [1] * 8
    sampler = GroupSampler(_Toy(flag), samples_per_gpu=4)
    # each group padded to a multiple of 4: 8 + 8
    assert len(sampler) == 16
    np.random.seed(0)
    idx = list(sampler)
    assert len(idx) == 16 and set(idx) == set(range(13))
    for b in range(4):
        assert len({flag[i] for i in idx[4 * b:4 * b + 4]}) == 1
    with pytest.raises(TypeError, match='flag'):
        GroupSampler(object())


def test_distributed_group_sampler():
    flag = [0] * 5 + [1] * 7
    ds = _Toy(flag)
    parts = [DistributedGroupSampler(ds, samples_per_gpu=2, num_replicas=2, rank=r, seed=3)
             for r in range(2)]
    out = [list(s) for s in parts]
    # per group: ceil(n / 2 / 2) * 2 per replica -> 4 + 4
    assert [len(o) for o in out] == [8, 8] and len(parts[0]) == 8
    assert set(out[0]) | set(out[1]) == set(range(12))
    for o in out:
        for b in range(4):
            assert len({flag[i] for i in o[2 * b:2 * b + 2]}) == 1
    again = DistributedGroupSampler(ds, 2, 2, 0, seed=3)
    assert list(again) == out[0]  # deterministic from seed + epoch
    again.set_epoch(1)
    assert list(again) != out[0]
    with pytest.raises(ValueError, match='rank'):
        DistributedGroupSampler(ds, 2, num_replicas=2, rank=2)


def test_build_dataloader_samplers_and_batches():
    ds = _Toy([1, 1, 0, 0, 1])
    loader = build_dataloader(ds, samples_per_gpu=2, workers_per_gpu=0, seed=0)
    assert isinstance(loader.sampler, GroupSampler)
    batches = list(loader)
    assert len(batches) == 3
    for b in batches:
        assert b['img'].shape == (2, 3, 4, 4) and len(b['img_metas']) == 2
        assert isinstance(b['gt_bboxes'], list) and len(b['gt_bboxes']) == 2
    # num_gpus scales the (non-distributed) batch
    assert build_dataloader(ds, 1, 0, num_gpus=2).batch_size == 2
    seq = build_dataloader(ds, 2, 0, shuffle=False)
    assert [m['idx'] for b in seq for m in b['img_metas']] == [0, 1, 2, 3, 4]
    # without a group flag (e.g. test-mode or classification datasets) shuffling still works
    noflag = [dict(img=torch.zeros(3, 2, 2), img_metas={})] * 3
    assert isinstance(build_dataloader(noflag, 1, 0).sampler, DistributedSampler)
    # dist=True outside torch.distributed: rank 0 of 1
    assert isinstance(build_dataloader(ds, 2, 0, dist=True, seed=1).sampler,
                      DistributedGroupSampler)
    assert isinstance(build_dataloader(ds, 2, 0, dist=True, shuffle=False).sampler,
                      DistributedSampler)
    dl = build_dataloader(ds, 2, 0, drop_last=True, shuffle=False)
    assert len(dl) == 2


def test_build_dataloader_with_workers_is_seeded():
    ds = _Toy([0, 1, 0, 1])
    loader = build_dataloader(ds, 2, 1, seed=5, shuffle=False, persistent_workers=True)
    assert loader.persistent_workers and loader.worker_init_fn is not None
    assert [m['idx'] for b in loader for m in b['img_metas']] == [0, 1, 2, 3]


def test_build_dataset_errors():
    with pytest.raises(KeyError, match='type'):
        build_dataset(dict(ann_file='x'))
    with pytest.raises(KeyError, match='VOCDataset'):
        build_dataset(dict(type='VOCDatset'))


def test_empty_dataset_fails_when_the_loader_is_built():
    for dist_ in (False, True):
        with pytest.raises(ValueError, match='cannot build a data loader over an empty '
                                             'dataset'):
            build_dataloader(_Toy([]), 2, 0, dist=dist_, seed=0)


def test_shuffled_order_depends_only_on_seed_and_epoch():
    """What exact resume needs: the same (seed, epoch) gives the same batches in a new loader,
    another epoch another order; with and without a group flag."""
    for data in (_Toy([0, 1] * 6), list(range(12))):
        def order(epoch, seed=3):
            loader = build_dataloader(data, 2, 0, seed=seed)
            loader.sampler.set_epoch(epoch)
            return list(loader.sampler)
        torch.manual_seed(123)
        np.random.seed(123)
        first = order(1)
        torch.manual_seed(7)
        np.random.seed(7)
        assert order(1) == first
        assert order(2) != first and sorted(order(2)) == sorted(first)
        assert order(1, seed=4) != first


def test_iterating_a_loader_leaves_the_trainers_torch_generator_alone():
    """Each ``iter(loader)`` draws the workers' base seed: from the loader's own generator, also
    without a seed (the evaluation's loader), so that an evaluation between two iterations does
    not change the dropout of the next, which a resumed run would not repeat."""
    for seed in (None, 3):
        loader = build_dataloader(_Toy([0, 1, 0]), 1, 0, shuffle=False, seed=seed)
        torch.manual_seed(0)
        state = torch.get_rng_state()
        assert len(list(loader)) == len(list(loader)) == 3
        assert torch.equal(torch.get_rng_state(), state)


def test_sync_random_seed_outside_torch_distributed():
    assert sync_random_seed(7) == 7 and sync_random_seed(None) == 0
    assert sync_random_seed(np.int64(3)) == 3
    with pytest.raises(TypeError, match="seed must be an int or None, got '3'"):
        sync_random_seed('3')


def _free_port():
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


FLAG = [0, 1, 1, 0, 1, 1, 0, 1, 1, 1]


def _samplers_worker(rank, port, out_dir):
    os.environ.update(MASTER_ADDR='127.0.0.1', MASTER_PORT=str(port))
    dist.init_process_group('gloo', rank=rank, world_size=2)
    try:
        out = {}
        for name, data in (('group', _Toy(FLAG)), ('plain', list(range(10)))):
            sampler = build_dataloader(data, 2, 0, dist=True, seed=10 + rank).sampler
            sampler.set_epoch(1)
            out[name] = [(int(i), i.seed) for i in sampler]
        torch.save(out, os.path.join(out_dir, f'rank{rank}.pth'))
    finally:
        dist.destroy_process_group()


@pytest.mark.subprocess
@pytest.mark.skipif(not dist.is_available(), reason='torch.distributed is not available')
def test_ranks_with_different_seeds_share_rank_0s_sampler_seed(tmp_path):
    """``--diff-seed`` gives each rank its own seed; the ranks must still cut one order into
    disjoint parts (mmdet 2.x's ``sync_random_seed``), so no sample is seen twice and none is
    missed, and a sample's augmentation seed does not depend on the rank that loads it."""
    mp.start_processes(_samplers_worker, args=(_free_port(), str(tmp_path)), nprocs=2,
                       start_method='fork')
    parts = [torch.load(tmp_path / f'rank{r}.pth', weights_only=True) for r in range(2)]
    plain = [[i for i, _ in part['plain']] for part in parts]
    assert sorted(plain[0] + plain[1]) == list(range(10))
    for rank, part in enumerate(parts):
        expected = DistributedGroupSampler(_Toy(FLAG), 2, num_replicas=2, rank=rank, seed=10)
        expected.set_epoch(1)
        assert [i for i, _ in part['group']] == list(expected)
        for name in ('group', 'plain'):
            assert all(s == sample_seed(10, 1, i) for i, s in part[name])


def test_a_wrapper_takes_built_datasets_as_mmdet_does():
    # build_dataset builds the configs a wrapper's config names, then wraps them
    with pytest.raises(TypeError, match='build_dataset'):
        RepeatDataset(dict(type='CocoDataset', ann_file='a.json', pipeline=[]), 2)
    with pytest.raises(TypeError, match='takes built datasets'):
        ConcatDataset([dict(type='CocoDataset', ann_file='a.json', pipeline=[])])
