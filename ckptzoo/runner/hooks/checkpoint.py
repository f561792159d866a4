"""mmcv 1.x CheckpointHook: save every ``interval`` epochs/iterations and keep the newest few."""
import contextlib
import glob
import inspect
import os
import os.path as osp
import re

import torch
import torch.distributed as dist

from ...registry import HOOKS, check_keys
from ..finite import last_finite_checkpoint
from .hook import Hook

__all__ = ['CheckpointHook', 'allreduce_buffers']

_LOCAL_BACKENDS = (None, 'disk', 'local')
#: mmcv 1.x ``runner.save_checkpoint`` arguments a CheckpointHook passes on (``**kwargs``)
SAVE_ARGS = ('filename_tmpl', 'meta', 'create_symlink')


def check_local_file_client(file_client_args, owner):
    """Only local files are supported; say so for an mmcv petrel/http/lmdb file client."""
    if file_client_args is None:
        return
    if not isinstance(file_client_args, dict):
        raise TypeError(f'{owner} file_client_args must be a dict or None, '
                        f'got {file_client_args!r}')
    backend = file_client_args.get('backend')
    if backend not in _LOCAL_BACKENDS:
        raise ValueError(f'{owner} only writes local files: file_client_args backend must be '
                         f'"disk" or unset, got {backend!r}')


def out_dir_for(out_dir, work_dir):
    """mmcv's rule: an ``out_dir`` other than the work_dir gets the work_dir's basename."""
    if not out_dir:
        return work_dir
    if out_dir != work_dir:
        return osp.join(out_dir, osp.basename(work_dir.rstrip(osp.sep)))
    return out_dir


def allreduce_buffers(buffers):
    """Average floating-point buffers (BN running stats) over the ranks.

    Integer buffers (``num_batches_tracked``) are left alone: they are equal on every rank and
    an in-place integer division fails.
    """
    if not (dist.is_available() and dist.is_initialized()):
        return
    world_size = dist.get_world_size()
    if world_size == 1:
        return
    for buf in buffers:
        if torch.is_floating_point(buf):
            dist.all_reduce(buf)
            buf.div_(world_size)


def _template_regex(filename_tmpl):
    field = re.search(r'\{[^{}]*\}', filename_tmpl)
    if field is None:
        return None
    return re.compile(re.escape(filename_tmpl[:field.start()]) + r'(\d+)'
                      + re.escape(filename_tmpl[field.end():]) + r'$')


@HOOKS.register_module()
class CheckpointHook(Hook):
    """Save checkpoints through ``runner.save_checkpoint``.

    Args:
        interval (int): save every ``interval`` epochs (``by_epoch``) or iterations; -1 never
            (only the last one with ``save_last``).
        by_epoch (bool): count epochs, else iterations.
        save_optimizer (bool): also save the optimizer state.
        out_dir (str | None): where to save; default the work_dir. Another directory gets the
            work_dir's basename appended, as mmcv.
        max_keep_ckpts (int): keep only the newest this many checkpoints (-1: all).
        save_last (bool): also save at the last epoch/iteration.
        sync_buffer (bool): average the model buffers over the ranks before saving.
        file_client_args (dict | None): accepted for mmcv configs; only local disk is supported.
        **kwargs: passed on to ``runner.save_checkpoint``: ``filename_tmpl``, ``meta``,
            ``create_symlink``. mmcv took any key here, so a typo (``max_keep_ckpt=1``) only
            failed in ``save_checkpoint`` after the first epoch; here it fails at once.

    Fix over mmcv: ``max_keep_ckpts`` looks at the checkpoint files that exist (named by the
    filename template) instead of counting back by ``interval``, so a last checkpoint off the
    interval, or a missing one after a resume, no longer leaves extra checkpoints behind; and
    it never deletes the newest checkpoint with finite weights (``runner.last_finite_checkpoint``).
    """

    def __init__(self, interval=-1, by_epoch=True, save_optimizer=True, out_dir=None,
                 max_keep_ckpts=-1, save_last=True, sync_buffer=False, file_client_args=None,
                 **kwargs):
        # the hook's own arguments are among the allowed ones for the close matches
        own = [p for p in inspect.signature(CheckpointHook).parameters if p != 'kwargs']
        check_keys(kwargs, SAVE_ARGS + tuple(own), owner='CheckpointHook')
        if not isinstance(interval, int) or isinstance(interval, bool) or interval == 0:
            raise ValueError(f'interval must be a positive int, or -1 to save only the last '
                             f'checkpoint, got {interval!r}')
        if not isinstance(max_keep_ckpts, int) or max_keep_ckpts == 0:
            raise ValueError(f'max_keep_ckpts must be a positive int or -1 (keep all), '
                             f'got {max_keep_ckpts!r}')
        check_local_file_client(file_client_args, 'CheckpointHook')
        self.interval = interval
        self.by_epoch = by_epoch
        self.save_optimizer = save_optimizer
        self.out_dir = out_dir
        self.max_keep_ckpts = max_keep_ckpts
        self.save_last = save_last
        self.sync_buffer = sync_buffer
        self.file_client_args = file_client_args
        self.args = kwargs

    def before_run(self, runner):
        self.out_dir = out_dir_for(self.out_dir, runner.work_dir)
        runner.logger.info(f'Checkpoints will be saved to {self.out_dir}.')

    def after_train_epoch(self, runner):
        if not self.by_epoch:
            return
        if self.every_n_epochs(runner, self.interval) or (
                self.save_last and self.is_last_epoch(runner)):
            self._announce_and_save(runner, f'{runner.epoch + 1} epochs')

    def after_train_iter(self, runner):
        if self.by_epoch:
            return
        if self.every_n_iters(runner, self.interval) or (
                self.save_last and self.is_last_iter(runner)):
            self._announce_and_save(runner, f'{runner.iter + 1} iterations')

    def _announce_and_save(self, runner, when):
        # from the announcement on, one protected section: a stop at once waits for the save
        saving = runner.saving() if callable(getattr(runner, 'saving', None)) \
            else contextlib.nullcontext()
        with saving:
            runner.logger.info(f'Saving checkpoint at {when}')
            if self.sync_buffer:
                allreduce_buffers(runner.model.buffers())
            self._save_checkpoint(runner)

    def _filename_tmpl(self):
        return self.args.get('filename_tmpl', 'epoch_{}.pth' if self.by_epoch else 'iter_{}.pth')

    def _save_checkpoint(self, runner):
        if callable(getattr(runner, 'gather_for_save', None)):
            runner.gather_for_save()  # every rank: their accumulated gradients differ
        if runner.rank != 0:
            return
        filename_tmpl = self._filename_tmpl()
        current = runner.epoch + 1 if self.by_epoch else runner.iter + 1
        args = dict(self.args, filename_tmpl=filename_tmpl)
        runner.save_checkpoint(self.out_dir, save_optimizer=self.save_optimizer, **args)
        if runner.meta is not None:
            runner.meta.setdefault('hook_msgs', dict())
            runner.meta['hook_msgs']['last_ckpt'] = osp.join(self.out_dir,
                                                             filename_tmpl.format(current))
        if self.max_keep_ckpts > 0:
            self._remove_old(runner, filename_tmpl, current)
        self._remove_preempted(runner)

    def _remove_preempted(self, runner):
        """A preemption checkpoint is superseded by any later checkpoint: remove it."""
        done = runner.iter + 1 if not self.by_epoch else runner.iter
        protected = last_finite_checkpoint(runner)
        for path in glob.glob(osp.join(self.out_dir, 'preempted_iter_*.pth')):
            match = re.fullmatch(r'preempted_iter_(\d+)\.pth', osp.basename(path))
            if match and int(match.group(1)) < done and not (
                    protected and osp.abspath(path) == osp.abspath(protected)):
                os.remove(path)

    def _remove_old(self, runner, filename_tmpl, current):
        pattern = _template_regex(filename_tmpl)
        if pattern is None or not osp.isdir(self.out_dir):
            return
        found = []
        for name in os.listdir(self.out_dir):
            match = pattern.match(name)
            path = osp.join(self.out_dir, name)
            # the "latest.pth" symlink is not a template match; skip links to stay safe
            if match and osp.isfile(path) and not osp.islink(path):
                found.append((int(match.group(1)), path))
        # checkpoints newer than this one come from an earlier, longer run: leave them
        kept = sorted((n for n in found if n[0] <= current), reverse=True)
        # never the newest one with finite weights (with check_finite=False NaN ones are saved)
        protected = last_finite_checkpoint(runner)
        for _, path in kept[self.max_keep_ckpts:]:
            if protected and osp.abspath(path) == osp.abspath(protected):
                runner.logger.info(f'Kept {path}: the newest checkpoint with finite weights')
                continue
            os.remove(path)
            runner.logger.info(f'Removed old checkpoint {path}')
