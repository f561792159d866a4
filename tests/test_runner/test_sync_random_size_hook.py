"""SyncRandomSizeHook: mmdet's name and arguments; a training set without
``update_dynamic_scale`` (every mmdet 2.x dataset: mmdet fails when the first epoch ends) is
refused before the run, naming YOLOX's own random sizes; a set with it gets a new size every
``interval`` epochs, the same on every rank and after a resume."""
import types

import pytest

from ckptzoo.registry import build_hook
from ckptzoo.runner.hooks import SyncRandomSizeHook


class _Dynamic:
    def __init__(self):
        self.scales = []

    def update_dynamic_scale(self, scale):
        self.scales.append(scale)


def _runner(dataset, epoch=0):
    return types.SimpleNamespace(data_loader=types.SimpleNamespace(dataset=dataset), epoch=epoch)


def test_a_dataset_without_dynamic_scale_is_refused_before_the_run():
    hook = build_hook(dict(type='SyncRandomSizeHook', ratio_range=(10, 20), img_scale=(640, 640)))
    with pytest.raises(TypeError, match='MultiImageMixDataset has none.*random_size_range'):
        hook.before_run(_runner(type('MultiImageMixDataset', (), {})()))


def test_sizes_every_interval_epochs_the_same_on_every_rank():
    dataset = _Dynamic()
    hook = SyncRandomSizeHook(ratio_range=(14, 26), img_scale=(640, 960), interval=2)
    hook.before_run(_runner(dataset))
    for epoch in range(8):
        hook.after_train_epoch(_runner(dataset, epoch))
    assert len(dataset.scales) == 4  # after epochs 2, 4, 6, 8
    other_rank = SyncRandomSizeHook(ratio_range=(14, 26), img_scale=(640, 960), interval=2)
    assert dataset.scales == [other_rank.size(e) for e in (1, 3, 5, 7)]
    for h, w in dataset.scales:
        assert h % 32 == 0 and 14 * 32 <= h <= 26 * 32 and w == 32 * int(h // 32 * 1.5)
    draws = {SyncRandomSizeHook().size(e) for e in range(200)}
    assert {h // 32 for h, _ in draws} == set(range(14, 27))  # every s in range is drawn
    SyncRandomSizeHook(ratio_range=None).after_train_epoch(_runner(None))  # never changes


@pytest.mark.parametrize('kwargs, match', [
    (dict(ratio_range=(26, 14)), 'lo <= hi'), (dict(ratio_range=(14,)), 'ratio_range'),
    (dict(img_scale=(640, 0)), 'img_scale'), (dict(interval=0), 'interval')])
def test_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        SyncRandomSizeHook(**kwargs)
