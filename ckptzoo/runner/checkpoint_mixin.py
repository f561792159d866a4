"""The checkpoint half of mmcv 1.x's BaseRunner: ``save_checkpoint``, ``resume`` and
``load_checkpoint``, a mixin of :class:`~ckptzoo.runner.base_runner.BaseRunner` (which owns the
state it reads: the model, optimizer, hooks, position, ``meta``, the preemption flag).

Two fixes over mmcv, both about resuming exactly:

* a checkpoint records *completed* iterations and epochs (mmcv's iter runner saves from inside
  ``after_train_iter`` one iteration short, so a resumed run repeats an iteration), plus the
  position inside the epoch, so a run resumes mid-epoch on the very next batch;
* ``resume`` restores ``meta`` for both runners (mmcv's iter runner drops it, and with it the
  loss-scaler state of FP16 training), and the random generators (dropout, drop path), which
  mmcv does not save. Hooks may add to a checkpoint and read it back through
  the ``before_save_checkpoint`` / ``after_load_checkpoint`` stages (as in mmengine): gradient
  accumulation stores the gradients of a window not yet stepped.

A save is never interrupted by a stop at once (:meth:`CheckpointMixin.saving`), and the runner
remembers the newest checkpoint with finite weights (:mod:`.finite`).
"""
import os.path as osp
import time

from ..version import __version__
from .checkpoint import (get_state_dict, load_checkpoint, load_file, model_state_dict,
                         point_latest, save_checkpoint, weights_to_cpu)
from .checkpoint_match import (apply_hyperparameters, check_resumable, describe_changes,
                               hyperparameter_changes, load_state_dict)
from .finite import nonfinite_tensors
from .rng_state import gather_rng_states, get_rng_state, restore_rng_state
from .utils import unwrap_model

__all__ = ['CheckpointMixin']


class CheckpointMixin:
    """Saving, resuming and loading a runner's checkpoints (mixed into ``BaseRunner``)."""

    def _latest_checkpoint(self):
        """What ``latest.pth`` points to (``--auto-resume`` continues from it), or None."""
        out_dir = self._checkpoint_dir()
        latest = osp.join(out_dir, 'latest.pth') if out_dir else None
        return osp.realpath(latest) if latest and osp.isfile(latest) else None

    def gather_for_save(self):
        """Collective, on every rank right before a checkpoint that rank 0 writes: hooks with a
        ``gather_for_save(runner, iters)`` method collect what differs between the ranks (the
        accumulated gradients) -- and each rank's random state (:mod:`.rng_state`)."""
        iters = self._checkpoint_position()[1]
        if self.world_size > 1:
            self._gathered_rng = (iters, gather_rng_states())
        for hook in self._hooks:
            if callable(getattr(hook, 'gather_for_save', None)):
                hook.gather_for_save(self, iters)

    _gathered_rng = None  # (completed iterations, every rank's random state) on rank 0

    def _checkpoint_dir(self):
        """Where the CheckpointHook saves (``latest.pth`` lives there), else the work_dir."""
        from .hooks.checkpoint import CheckpointHook
        for hook in self._hooks:
            if isinstance(hook, CheckpointHook) and hook.out_dir:
                return hook.out_dir
        return self.work_dir

    def save_checkpoint(self, out_dir, filename_tmpl='epoch_{}.pth', save_optimizer=True,
                        meta=None, create_symlink=True, filename_index=None):
        """Save atomically to ``out_dir/filename_tmpl.format(index)`` and point ``latest.pth``
        at it. ``index`` defaults to the completed epochs (``epoch_{}``) or iterations."""
        if meta is not None and not isinstance(meta, dict):
            raise TypeError(f'meta must be a dict or None, got {type(meta).__name__}')
        with self.saving():  # all of it: a stop at once waits for the complete save
            epochs, iters, inner = self._checkpoint_position()
            meta = dict(meta or {})
            if self.meta is not None:
                meta.update(self.meta)
            meta.update(epoch=epochs, iter=iters, inner_iter=inner,
                        time=time.asctime(), ckptzoo_version=__version__)
            if self._optimizer_hparams is not None:
                meta['optimizer_hparams'] = self._optimizer_hparams
            meta['rng_state'] = self._rng_states(iters)
            if filename_index is None:
                filename_index = epochs if filename_tmpl.startswith('epoch') else iters
            filename = filename_tmpl.format(filename_index)
            filepath = osp.join(out_dir, filename)
            state_dict = weights_to_cpu(get_state_dict(self.model))
            meta['finite_weights'] = not nonfinite_tensors(state_dict)
            checkpoint = dict(meta=meta, state_dict=state_dict)
            if save_optimizer and self.optimizer is not None:
                if isinstance(self.optimizer, dict):
                    checkpoint['optimizer'] = {k: o.state_dict()
                                               for k, o in self.optimizer.items()}
                else:
                    checkpoint['optimizer'] = self.optimizer.state_dict()
            self.call_hook('before_save_checkpoint', checkpoint)  # may refuse non-finite weights
            previous = self._last_finite_ckpt
            if meta['finite_weights']:
                self._set_last_finite(filepath, meta)  # recorded in the checkpoint itself
            try:
                save_checkpoint(checkpoint, filepath)
            except BaseException:
                self._set_last_finite(previous, meta)
                raise
            if create_symlink:
                point_latest(out_dir, filename, checkpoint)
            return filepath

    def saving(self):
        """A checkpoint save in progress (a ``with`` block): a stop at once requested meanwhile
        (a second signal, the grace period) waits for its end, so an announced checkpoint is
        always written in full."""
        return self._preemption.saving()

    def _rng_states(self, iters):
        """Every rank's random state at ``iters`` (rank 0's own when it saves alone under DDP,
        as the best checkpoint: the others' are unknown, None)."""
        if self.world_size == 1:
            return [get_rng_state()]
        gathered = self._gathered_rng
        if gathered is not None and gathered[0] == iters and gathered[1] is not None:
            return gathered[1]
        return [get_rng_state()] + [None] * (self.world_size - 1)

    def _set_last_finite(self, path, meta):
        self._last_finite_ckpt = path
        for target in (self.meta, meta):
            if target is not None:
                target.setdefault('hook_msgs', {})['last_finite_ckpt'] = path

    def load_checkpoint(self, filename, map_location='cpu', strict=False,
                        revise_keys=((r'^module\.', ''), )):
        self.logger.info('load checkpoint from %s', filename)
        return load_checkpoint(self.model, filename, map_location, strict, self.logger,
                               revise_keys=revise_keys)

    def _restored_by_hooks(self, key):
        """A state-dict key a hook restores itself in ``after_load_checkpoint`` (the EMA
        hook's ``ema_*`` buffers, created only when the run starts)."""
        return any(callable(getattr(h, 'restores_state_key', None)) and
                   h.restores_state_key(key) for h in self._hooks)

    def resume(self, checkpoint, resume_optimizer=True, map_location='default'):
        """Continue from ``checkpoint``: weights, optimizer, position, ``meta`` and this rank's
        random state (:mod:`.rng_state`; a checkpoint without one resumes with a warning).

        The checkpoint must fit the run exactly (model keys and shapes, optimizer type, param
        groups and state shapes): otherwise :class:`CheckpointMismatch` names the file and the
        differences, before anything is loaded. Hyper-parameters the config sets differently
        (``optimizer.lr=0.5`` on the command line) win over the checkpoint's, with a warning
        naming both (mmcv silently kept the checkpoint's, so a lowered lr had no effect).
        """
        if map_location == 'default':
            map_location = 'cpu'
        self.logger.info('resume from %s', checkpoint)
        self.resumed_from = checkpoint
        ckpt = load_file(checkpoint, map_location)
        ckpt_meta = ckpt.get('meta') if isinstance(ckpt, dict) else None
        if not isinstance(ckpt_meta, dict) or 'iter' not in ckpt_meta:
            raise KeyError(f'{checkpoint} has no meta with epoch/iter: not a training checkpoint '
                           '(use load_from to start from its weights)')
        module = unwrap_model(self.model)
        state_dict = model_state_dict(ckpt, checkpoint)
        optim_state = ckpt.get('optimizer') if resume_optimizer else None
        stored = ckpt_meta.get('optimizer_hparams')
        check_resumable(module, self.optimizer, state_dict, optim_state, stored, checkpoint,
                        self._restored_by_hooks)
        if resume_optimizer and self.optimizer is not None and optim_state is None:
            self.logger.warning(f'{checkpoint} has no optimizer state: the optimizer starts '
                                'afresh (momentum buffers at zero)')
        load_state_dict(module, state_dict, checkpoint, strict=True,
                        restored_elsewhere=self._restored_by_hooks)
        self._epoch = ckpt_meta.get('epoch', 0)
        self._iter = ckpt_meta['iter']
        self._resume_inner_iter = ckpt_meta.get('inner_iter', 0)
        if self.meta is None:
            self.meta = {}
        keep = {'epoch', 'iter', 'inner_iter', 'time', 'ckptzoo_version', 'config', 'env_info',
                'seed', 'exp_name', 'optimizer_hparams', 'rng_state'}
        for key, value in ckpt_meta.items():
            if key not in keep:
                self.meta[key] = value
        self._last_finite_ckpt = (self.meta.get('hook_msgs') or {}).get('last_finite_ckpt')
        if optim_state is not None and self.optimizer is not None:
            changes = hyperparameter_changes(self.optimizer, optim_state, stored)
            if isinstance(self.optimizer, dict):
                for name in self.optimizer:
                    self.optimizer[name].load_state_dict(optim_state[name])
            else:
                self.optimizer.load_state_dict(optim_state)
            if changes:
                apply_hyperparameters(self.optimizer, changes)
                self.logger.warning(describe_changes(changes, checkpoint))
        self.call_hook('after_load_checkpoint', ckpt)
        restore_rng_state(ckpt_meta.get('rng_state'), self.rank, self.world_size, checkpoint,
                          self.logger)
        self.logger.info('resumed epoch %d, iter %d', self._epoch, self._iter)
        return ckpt
