"""mmdet 2.x ``YOLOXLrUpdaterHook`` (``lr_config = dict(policy='YOLOX', ...)``): a warmup
``lr = warmup_ratio * base_lr * ((i + 1) / warmup_iters) ** 2``, then a cosine from the base
lr to ``min_lr`` (or ``base_lr * min_lr_ratio``) that ends ``num_last_epochs`` before the end
of training, and that final lr for the last ``num_last_epochs`` epochs.

Fixes over mmdet: with ``by_epoch=True`` the last epochs are counted in epochs (mmdet
subtracted ``len(data_loader) * num_last_epochs`` iterations from a count of epochs); under
gradient accumulation the schedule counts optimizer updates, as every ckptzoo lr hook does
(see :mod:`.lr_updater`). YOLOX's configs (``by_epoch=False``, no accumulation) give mmdet's
lr at every iteration.
"""
import math

from ...registry import HOOKS
from .lr_updater import CosineAnnealingLrUpdaterHook, annealing_cos, get_cumulative_iters

__all__ = ['YOLOXLrUpdaterHook']


@HOOKS.register_module()
class YOLOXLrUpdaterHook(CosineAnnealingLrUpdaterHook):
    """Args: ``num_last_epochs`` (int), and those of ``CosineAnnealingLrUpdaterHook``
    (``min_lr`` / ``min_lr_ratio``, ``by_epoch``, ``warmup`` (its shape is YOLOX's whatever
    the type), ``warmup_iters``, ``warmup_ratio``, ``warmup_by_epoch``)."""

    def __init__(self, num_last_epochs, **kwargs):
        if isinstance(num_last_epochs, bool) or not isinstance(num_last_epochs, int) \
                or num_last_epochs < 0:
            raise ValueError(f'YOLOXLrUpdaterHook num_last_epochs must be a non-negative '
                             f'int, got {num_last_epochs!r}')
        self.num_last_epochs = num_last_epochs
        super().__init__(**kwargs)

    def get_warmup_lr(self, cur_iters):
        k = self.warmup_ratio * pow((cur_iters + 1) / float(self.warmup_iters), 2)
        if isinstance(self.base_lr, dict):
            return {name: [lr * k for lr in lrs] for name, lrs in self.base_lr.items()}
        return [lr * k for lr in self.base_lr]

    def get_lr(self, runner, base_lr):
        progress, max_progress = self.get_progress(runner)
        if self.by_epoch:
            last = self.num_last_epochs
        else:
            last = math.ceil(len(runner.data_loader) * self.num_last_epochs /
                             get_cumulative_iters(runner))
        progress += 1
        target = self.target_lr(base_lr)
        if progress >= max_progress - last:
            return target
        warmup = self.warmup_iters or 0
        return annealing_cos(base_lr, target,
                             (progress - warmup) / (max_progress - warmup - last))
