"""The model side of the runner contract (mmdet 2.x ``BaseDetector`` / mmcls ``BaseClassifier``).

``model.train_step(data_batch, optimizer)`` returns ``dict(loss, log_vars, num_samples)``; the
optimizer hook does backward and step. ``forward`` dispatches on ``return_loss`` so that a
``DistributedDataParallel`` wrapper can run the training forward through its own ``__call__``.
"""
from collections import OrderedDict

import torch
import torch.distributed as dist
import torch.nn as nn

from ..runner.fp16 import auto_fp16
from .checkpointing import CheckpointOwnerMixin

__all__ = ['BaseModel']


class BaseModel(CheckpointOwnerMixin, nn.Module):
    """Subclasses implement ``forward_train(img, **kwargs) -> dict of losses`` and
    ``forward_test(img, **kwargs) -> results``; ``fp16_enabled`` is switched on by
    :func:`ckptzoo.runner.fp16.wrap_fp16_model` and runs ``forward`` under autocast.

    ``checkpoint_units()`` / ``set_checkpoint_plan()`` / ``checkpoint_plan()`` reach the units
    of the backbone, neck and head (:mod:`ckptzoo.models.checkpointing`)."""

    def __init__(self, init_cfg=None):
        super().__init__()
        self.fp16_enabled = False
        self.init_cfg = init_cfg

    def init_weights(self):
        """Let children load their ``init_cfg`` (e.g. a pretrained backbone)."""
        for m in self.children():
            if hasattr(m, 'init_weights'):
                m.init_weights()

    @auto_fp16(apply_to=('img', ))
    def forward(self, img, return_loss=True, **kwargs):
        if return_loss:
            return self.forward_train(img, **kwargs)
        return self.forward_test(img, **kwargs)

    def forward_train(self, img, **kwargs):
        raise NotImplementedError

    def forward_test(self, img, **kwargs):
        raise NotImplementedError

    @staticmethod
    def _parse_losses(losses):
        """Sum every ``*loss*`` entry into ``loss``; ``log_vars`` are floats (averaged over
        processes when distributed, for logging only)."""
        log_vars = OrderedDict()
        for name, value in losses.items():
            if isinstance(value, torch.Tensor):
                log_vars[name] = value.mean()
            elif isinstance(value, (list, tuple)):
                log_vars[name] = sum(v.mean() for v in value)
            else:
                raise TypeError(f'{name} is not a tensor or list of tensors: {type(value)}')
        loss = sum(v for k, v in log_vars.items() if 'loss' in k)
        if not isinstance(loss, torch.Tensor):
            raise ValueError(f'no loss term among the outputs {list(losses)}')
        log_vars['loss'] = loss
        distributed = dist.is_available() and dist.is_initialized()
        for name, value in log_vars.items():
            value = value.detach().float()
            if distributed:
                value = value.clone()
                dist.all_reduce(value.div_(dist.get_world_size()))
            log_vars[name] = value.item()
        return loss, log_vars

    @staticmethod
    def _num_samples(data):
        return len(data['img_metas']) if 'img_metas' in data else len(data['img'])

    def train_step(self, data, optimizer=None, forward=None):
        """One training forward. ``forward`` is the callable to run it through (a DDP wrapper's
        ``__call__``); by default the model itself."""
        losses = (forward or self)(**data)
        loss, log_vars = self._parse_losses(losses)
        return dict(loss=loss, log_vars=log_vars, num_samples=self._num_samples(data))

    def val_step(self, data, optimizer=None, forward=None):
        """The same as ``train_step`` (mmdet 2.x): validation losses, no backward."""
        return self.train_step(data, optimizer, forward)
