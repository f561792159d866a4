"""Per-sample random state: augmentations are a function of (seed, epoch, index), so a resumed
run trains on the very images (flipped, rescaled) that the uninterrupted run saw."""
import os
import os.path as osp
import pickle
import shutil

import numpy as np
import pytest
import torch

from ckptzoo.datasets import (ConcatDataset, RepeatDataset, SeededIndex, VOCDataset,
                              build_dataloader, generate_voc, sample_seed)
from ckptzoo.registry import TRANSFORMS

from tests.helpers.faults import start_train, wait

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
CLASSES = ('circle', 'square')


@TRANSFORMS.register_module(force=True)
class RecordDraws:
    """Puts the draws the pipeline made into the results: numpy's and Python's global
    generators (as users' mmdet transforms use them) and torch's (as torchvision's do)."""

    def __call__(self, results):
        import random
        results['draws'] = (float(np.random.rand()), random.random(), float(torch.rand(())))
        return results


PIPELINE = [
    dict(type='LoadImageFromFile'),
    dict(type='LoadAnnotations', with_bbox=True),
    dict(type='Resize', img_scale=[(64, 48), (80, 64)], multiscale_mode='range',
         keep_ratio=True),
    dict(type='RandomFlip', flip_ratio=0.5),
    dict(type='RecordDraws'),
    dict(type='DefaultFormatBundle'),
    dict(type='Collect', keys=['img'], meta_keys=('flip', 'scale_factor', 'draws')),
]


@pytest.fixture(scope='module')
def voc_root(tmp_path_factory):
    root = tmp_path_factory.mktemp('voc')
    generate_voc(str(root), num_trainval=10, num_test=0, img_size=((40, 64), (40, 64)),
                 classes=CLASSES, obj_size=(20, 30), max_objects=2)
    return str(root / 'VOCdevkit')


def _voc(voc_root, pipeline):
    return VOCDataset(ann_file=osp.join(voc_root, 'VOC2007/ImageSets/Main/trainval.txt'),
                      img_prefix=osp.join(voc_root, 'VOC2007/'), classes=CLASSES,
                      pipeline=pipeline)


def _key(meta):
    return meta['flip'], tuple(meta['scale_factor'].tolist()), meta['draws']


def _draws(loader, epoch):
    """{dataset index: {(flip, scale factor, numpy / random / torch draws)}} of one epoch."""
    loader.sampler.set_epoch(epoch)
    out = {}
    for batch in loader:
        for meta in batch['img_metas']:
            out.setdefault(meta['idx'], set()).add(_key(meta))
    return out


class _Indexed:
    """The dataset's items with their index (to tell which sample a draw belongs to)."""

    def __init__(self, dataset):
        self.dataset, self.flag = dataset, dataset.flag

    def __len__(self):
        return len(self.dataset)

    def __getitem__(self, idx):
        item = self.dataset[idx]
        item['img_metas']['idx'] = int(idx)
        return item


def test_seeded_index_is_an_int_and_pickles():
    idx = SeededIndex(3, 12345)
    assert idx == 3 and [10, 11, 12, 13][idx] == 13 and idx % 2 == 1
    again = pickle.loads(pickle.dumps(idx))
    assert type(again) is SeededIndex and again == 3 and again.seed == 12345
    assert sample_seed(0, 1, 3) == sample_seed(0, 1, 3) != sample_seed(0, 2, 3)
    assert sample_seed(None, 1, 3) == sample_seed(0, 1, 3)
    assert len({sample_seed(s, e, i) for s in range(3) for e in range(3) for i in range(3)}) == 27


class _Flagged:
    flag = np.array([0, 1, 1, 0, 1, 1, 0], dtype=np.uint8)

    def __len__(self):
        return len(self.flag)


@pytest.mark.parametrize('dist', [False, True])
@pytest.mark.parametrize('flag', [False, True])
@pytest.mark.parametrize('shuffle', [False, True])
def test_every_sampler_of_build_dataloader_seeds_its_indices(dist, flag, shuffle):
    data = _Flagged() if flag else list(range(7))
    sampler = build_dataloader(data, 2, 0, dist=dist, shuffle=shuffle, seed=5).sampler
    sampler.set_epoch(3)
    indices = list(sampler)
    assert sorted(set(indices)) == list(range(7))
    assert all(type(i) is SeededIndex and i.seed == sample_seed(5, 3, i) for i in indices)


def test_draws_depend_on_seed_epoch_index_only(voc_root):
    """The same (seed, epoch, index) draws the same with 0 or 2 workers, persistent or not, and
    through the wrappers; another epoch draws anew; the trainer's generators are untouched."""
    dataset = _Indexed(_voc(voc_root, PIPELINE))

    def loader(workers, persistent=False):
        return build_dataloader(dataset, 2, workers, seed=7, persistent_workers=persistent)

    np.random.seed(1)
    state = np.random.get_state()[1].copy(), torch.get_rng_state()
    reference = [_draws(loader(0), epoch) for epoch in (0, 1, 2)]
    assert np.array_equal(np.random.get_state()[1], state[0])  # no workers: restored
    assert torch.equal(torch.get_rng_state(), state[1])
    for draws in reference:
        assert all(len(v) == 1 for v in draws.values())  # a repeated index: the same draws
    persistent = loader(2, persistent=True)
    for workers, get in ((2, lambda: loader(2)), (1, lambda: loader(1)),
                         ('persistent', lambda: persistent)):
        assert [_draws(get(), epoch) for epoch in (0, 1, 2)] == reference, workers
    # a later epoch alone (as after a resume) draws what it drew in the whole run
    assert _draws(loader(2), 2) == reference[2]
    # another epoch, another draw: per index, and the flips differ somewhere
    for index in reference[0]:
        assert reference[0][index] != reference[1][index]
    flips = [{k: next(iter(v))[0] for k, v in draws.items()} for draws in reference]
    scales = {next(iter(v))[1] for draws in reference for v in draws.values()}
    assert len(scales) > 3  # Resize's random scale
    assert flips[0] != flips[1] != flips[2]
    assert {f for draws in flips for f in draws.values()} == {True, False}
    # a dataset index gets its own draws, whoever indexes it: directly or through a wrapper
    plain = dataset.dataset
    for epoch, draws in enumerate(reference):
        for index, (value, ) in draws.items():
            item = plain[SeededIndex(index, sample_seed(7, epoch, index))]
            assert _key(item['img_metas']) == value

    def draws(data, index):
        return _key(data[SeededIndex(index, 99)]['img_metas'])

    assert draws(RepeatDataset(plain, 2), 13) == draws(plain, 3)
    assert draws(ConcatDataset([plain, plain]), 12) == draws(plain, 2)


class _Unseeded(torch.utils.data.Dataset):
    """A user's dataset that draws from the worker's numpy state (no seeded indices)."""

    def __len__(self):
        return 4

    def __getitem__(self, idx):
        return np.random.rand()


def test_workers_draw_anew_each_epoch():
    """Workers started anew each epoch are seeded from the epoch: mmdet 2.x's seeds repeat the
    previous epoch's draws; the same epoch still draws the same (exact resume)."""
    loader = build_dataloader(_Unseeded(), 1, 2, seed=3, shuffle=False)

    def epoch(e):
        loader.sampler.set_epoch(e)
        return [v for batch in loader for v in batch.tolist()]

    first, second = epoch(0), epoch(1)
    assert first != second
    assert epoch(0) == first and epoch(1) == second


TRAIN_CFG = """
_base_ = ['{root}/configs/_base_/models/retinanet_r50_fpn.py']
model = dict(
    backbone=dict(depth=18, base_channels=8, frozen_stages=-1, norm_eval=False, init_cfg=None),
    neck=dict(in_channels=[8, 16, 32, 64], out_channels=16),
    bbox_head=dict(num_classes=2, in_channels=16, stacked_convs=1, feat_channels=16,
                   anchor_generator=dict(octave_base_scale=2, scales_per_octave=1)))
img_norm_cfg = dict(mean=[123.675, 116.28, 103.53], std=[58.395, 57.12, 57.375], to_rgb=True)
data = dict(
    samples_per_gpu=2, workers_per_gpu={workers}, persistent_workers={persistent},
    train=dict(type='VOCDataset', classes={classes},
               ann_file='{voc}/VOC2007/ImageSets/Main/trainval.txt',
               img_prefix='{voc}/VOC2007/', pipeline=[
                   dict(type='LoadImageFromFile'),
                   dict(type='LoadAnnotations', with_bbox=True),
                   dict(type='Resize', img_scale=[(64, 48), (80, 64)], multiscale_mode='range',
                        keep_ratio=True),
                   dict(type='RandomFlip', flip_ratio=0.5),
                   dict(type='Normalize', **img_norm_cfg),
                   dict(type='Pad', size_divisor=32),
                   dict(type='DefaultFormatBundle'),
                   dict(type='Collect', keys=['img', 'gt_bboxes', 'gt_labels'])]))
optimizer = dict(type='SGD', lr=0.01, momentum=0.9, weight_decay=1e-4)
optimizer_config = dict(grad_clip=dict(max_norm=10))
lr_config = dict(policy='step', step=[2])
runner = {runner}
checkpoint_config = dict(interval=1, by_epoch=False)
log_config = dict(interval=1, hooks=[dict(type='TextLoggerHook')])
workflow = [('train', 1)]
seed = 0
"""

RUNNERS = dict(epoch="dict(type='EpochBasedRunner', max_epochs=3)",
               iter="dict(type='IterBasedRunner', max_iters=13)")


def _state(path):
    ckpt = torch.load(path, map_location='cpu', weights_only=True)
    return ckpt['meta']['iter'], ckpt['state_dict'], ckpt['optimizer']['state']


@pytest.mark.subprocess
@pytest.mark.parametrize('runner,workers,persistent', [('epoch', 0, False), ('epoch', 2, True),
                                                      ('iter', 2, True)])
def test_resume_with_random_augmentation_is_exact(tmp_path, voc_root, runner, workers,
                                                  persistent):
    """A tiny RetinaNet with random flips and scales, 5 iterations an epoch: resumed at the end
    of epoch 2 (``--auto-resume`` in a copy) and in the middle of it (``--resume-from``, as
    after a preemption), it ends with the uninterrupted run's weights and optimizer state."""
    cfg = tmp_path / 'cfg.py'
    cfg.write_text(TRAIN_CFG.format(root=ROOT, voc=voc_root, classes=CLASSES, workers=workers,
                                    persistent=persistent, runner=RUNNERS[runner]))
    full = tmp_path / 'full'
    args = [str(cfg), '--no-validate', '--work-dir']
    assert wait([start_train(args + [str(full)], tmp_path / 'full.log')]) == [0]
    os.makedirs(tmp_path / 'copy')
    shutil.copy(full / 'iter_10.pth', tmp_path / 'copy')
    procs = [start_train(args + [str(tmp_path / 'copy'), '--auto-resume'], tmp_path / 'a.log'),
             start_train(args + [str(tmp_path / 'mid'), '--resume-from', str(full / 'iter_7.pth')],
                         tmp_path / 'm.log')]
    assert wait(procs) == [0, 0]
    last, weights, optimizer = _state(full / 'latest.pth')
    assert last == (15 if runner == 'epoch' else 13)
    for resumed in ('copy', 'mid'):
        it, w, o = _state(tmp_path / resumed / 'latest.pth')
        assert it == last
        differ = [k for k in weights if not torch.equal(w[k], weights[k])]
        assert not differ, f'{resumed}: {len(differ)} of {len(weights)} differ: {differ[:3]}'
        assert o.keys() == optimizer.keys()
        assert all(torch.equal(o[k]['momentum_buffer'], optimizer[k]['momentum_buffer'])
                   for k in o)
    _, start, _ = _state(full / 'iter_7.pth')
    assert not torch.equal(start['bbox_head.retina_cls.weight'],
                           weights['bbox_head.retina_cls.weight'])  # the resumed part trained
