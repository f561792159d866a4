"""Stopping on non-finite numbers instead of training on with NaN (mmcv 1.x trains on).

The optimizer hooks check the loss of every iteration (and the gradient norm when they clip)
before anything of that iteration is saved; the runner records, for every checkpoint it writes,
whether its weights are finite, and remembers the newest one that is, so the error can name it
and checkpoint rotation never deletes it.
"""
import math
import os.path as osp

import torch

__all__ = ['nonfinite_tensors', 'last_finite_checkpoint', 'check_finite_loss',
           'nonfinite_error']


def nonfinite_tensors(state_dict):
    """Names of the floating-point tensors of ``state_dict`` holding inf or nan."""
    return [name for name, value in state_dict.items()
            if torch.is_tensor(value) and value.is_floating_point()
            and not bool(torch.isfinite(value).all())]


def last_finite_checkpoint(runner):
    """The newest checkpoint with finite weights that is still on disk, or None."""
    path = getattr(runner, 'last_finite_checkpoint', None)
    if path is None:
        path = ((getattr(runner, 'meta', None) or {}).get('hook_msgs') or {}).get(
            'last_finite_ckpt')
    return path if path and osp.isfile(path) else None


def _where(runner):
    where = f'iteration {runner.iter + 1}'
    if getattr(runner, 'max_epochs', None):
        where += f' (epoch {runner.epoch + 1}, iteration {runner.inner_iter + 1} of the epoch)'
    return where


def nonfinite_error(runner, what, advice=''):
    """A ``FloatingPointError`` naming the iteration, ``what`` went wrong and the newest
    checkpoint with finite weights."""
    ckpt = last_finite_checkpoint(runner)
    resume = (f'the last checkpoint with finite weights is {ckpt}' if ckpt else
              'there is no checkpoint with finite weights on disk')
    return FloatingPointError(
        f'{what} at {_where(runner)}; nothing of this iteration was saved, and {resume}. '
        f'{advice}check_finite=False in optimizer_config trains on regardless (as mmcv 1.x).')


def check_finite_loss(runner):
    """Raise :func:`nonfinite_error` when the total loss of this iteration is inf or nan.

    Reads the floats of ``outputs['log_vars']`` (already synchronised and, under DDP, averaged
    over the ranks, so every rank stops together); the loss tensor only when they are absent.
    """
    outputs = runner.outputs
    log_vars = outputs.get('log_vars') or {}
    total = log_vars.get('loss')
    if total is None:
        total = float(outputs['loss'].detach().float().sum())
    if math.isfinite(total):
        return
    terms = {k: v for k, v in log_vars.items()
             if isinstance(v, (int, float)) and not math.isfinite(v)}
    terms = terms or {'loss': total}
    shown = ', '.join(f'{k}={v}' for k, v in terms.items())
    raise nonfinite_error(runner, f'the loss is not finite ({shown})',
                          'Lower the learning rate or clip the gradients '
                          '(optimizer_config = dict(grad_clip=dict(max_norm=...))); ')
