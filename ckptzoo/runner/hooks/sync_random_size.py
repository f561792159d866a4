"""mmdet 2.x ``SyncRandomSizeHook`` (deprecated there): every ``interval`` epochs a new output
size ``32 * (s, int(s * w / h))``, ``s`` uniform in ``ratio_range``, given to the training
set's ``update_dynamic_scale``.

Fixes over mmdet:

* no mmdet 2.28 dataset has ``update_dynamic_scale`` (``MultiImageMixDataset`` refuses
  ``dynamic_scale``), so there the hook fails with an ``AttributeError`` when the first epoch
  ends; here a training set without it is refused before the run, naming what does the job:
  YOLOX's own ``random_size_range`` / ``random_size_interval``, whose sizes the memory planner
  covers, or a ``Resize`` with ``multiscale_mode='range'``;
* the size of each change is a pure function of the epoch (its own generator), so every rank
  computes the same size without a barrier and broadcast, and a resumed run draws the sizes
  the uninterrupted one did (mmdet drew from rank 0's global ``random``).

A training set of one's own with ``update_dynamic_scale`` gets the sizes as in mmdet; the
memory planner does not see them (it plans the shapes the pipeline gives), so a planned run
relies on its per-step guard there.
"""
import random

import numpy as np

from ...registry import HOOKS
from .hook import Hook

__all__ = ['SyncRandomSizeHook']


@HOOKS.register_module()
class SyncRandomSizeHook(Hook):
    """Args (mmdet's): ``ratio_range`` ((14, 26), None: never change), ``img_scale``
    ((640, 640), ``(h, w)``), ``interval`` (1 epoch), ``device`` ('cuda'; unused: nothing is
    communicated)."""

    def __init__(self, ratio_range=(14, 26), img_scale=(640, 640), interval=1, device='cuda'):
        for name, value in (('ratio_range', ratio_range), ('img_scale', img_scale)):
            if value is None and name == 'ratio_range':
                continue
            if not (isinstance(value, (tuple, list)) and len(value) == 2 and all(
                    isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in value)):
                raise ValueError(f'SyncRandomSizeHook {name} must be two positive ints, '
                                 f'got {value!r}')
        if ratio_range is not None and ratio_range[0] > ratio_range[1]:
            raise ValueError(f'SyncRandomSizeHook ratio_range must be (lo, hi) with lo <= hi, '
                             f'got {ratio_range!r}')
        if isinstance(interval, bool) or not isinstance(interval, int) or interval < 1:
            raise ValueError(f'SyncRandomSizeHook interval must be a positive int, '
                             f'got {interval!r}')
        self.ratio_range = None if ratio_range is None else tuple(ratio_range)
        self.img_scale = tuple(img_scale)
        self.interval = interval
        self.device = device

    def before_run(self, runner):
        dataset = runner.data_loader.dataset if getattr(runner, 'data_loader', None) else None
        if dataset is not None and not hasattr(dataset, 'update_dynamic_scale'):
            raise TypeError(
                f'SyncRandomSizeHook changes the output size of a training set with '
                f'update_dynamic_scale; {type(dataset).__name__} has none (no mmdet 2.x '
                f'dataset has: the hook is deprecated there). For YOLOX, remove the hook and '
                f'set model.random_size_range / model.random_size_interval (the model draws a '
                f'size every N iterations); otherwise use dict(type=\'Resize\', '
                f'img_scale=[(448, 448), (832, 832)], multiscale_mode=\'range\', '
                f'keep_ratio=True) in the pipeline')

    def size(self, epoch):
        """The size set after ``epoch`` (0-based) ends: ``32 * (s, int(s * w / h))``."""
        rng = random.Random(int(np.random.SeedSequence([0x5152, epoch]).generate_state(1)[0]))
        s = rng.randint(*self.ratio_range)
        aspect = self.img_scale[1] / self.img_scale[0]
        return int(32 * s), 32 * int(s * aspect)

    def after_train_epoch(self, runner):
        if self.ratio_range is not None and (runner.epoch + 1) % self.interval == 0:
            runner.data_loader.dataset.update_dynamic_scale(self.size(runner.epoch))
