"""mmcv 1.x TextLoggerHook: a text line per logging interval and a JSON-lines log file."""
import datetime
import json
import numbers
import os
import os.path as osp
import shutil
from collections import OrderedDict

import numpy as np
import torch
import torch.distributed as dist

from ....registry import HOOKS
from ...utils import cuda_device
from ..checkpoint import check_local_file_client, out_dir_for
from .base import LoggerHook

__all__ = ['TextLoggerHook']

# keys already printed in the head of the text line
_HEAD_KEYS = ('mode', 'Epoch', 'iter', 'lr', 'time', 'data_time', 'memory', 'epoch')


def _jsonable(obj):
    if isinstance(obj, torch.Tensor) and obj.numel() == 1:
        return obj.item()
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    return str(obj)


def _round_float(items):
    if isinstance(items, (list, tuple)):
        return [_round_float(item) for item in items]
    if isinstance(items, dict):
        return {k: _round_float(v) for k, v in items.items()}
    if isinstance(items, float):
        return round(items, 5)
    return items


def _iters_left(runner):
    """Training iterations after the current one, never negative."""
    loader, max_epochs = runner.data_loader, runner.max_epochs
    if max_epochs is not None and loader is not None and runner.mode == 'train':
        try:
            per_epoch = len(loader)
        except TypeError:
            per_epoch = None
        if per_epoch:
            left = (max_epochs - runner.epoch - 1) * per_epoch + per_epoch - runner.inner_iter - 1
            return max(left, 0)
    return max(runner.max_iters - runner.iter - 1, 0)


@HOOKS.register_module()
class TextLoggerHook(LoggerHook):
    """Log to ``runner.logger`` and to ``<work_dir>/<timestamp>.log.json``.

    The text line, as mmcv::

        Epoch [1][10/100]\tlr: 1.000e-02, eta: 0:01:23, time: 0.123, data_time: 0.010,
        memory: 123, loss_cls: 0.5000, loss: 0.7000, grad_norm: 1.2000

    ``memory`` (MiB, an int, max over the ranks) is the peak since the last log line: a value a
    hook put in the log buffer (``MemoryPlanHook``: measured steps, on a CPU too), else, on a
    CUDA device, ``torch.cuda.max_memory_allocated``, whose peak is reset after it is read. It
    appears on training lines only. The JSON log has one dict per line; the first is
    ``runner.meta`` (env info, config, seed, exp_name as set by ``tools/train.py``).

    Args:
        by_epoch, interval, ignore_last, reset_flag: see :class:`LoggerHook`.
        interval_exp_name (int): print ``runner.meta['exp_name']`` every this many iterations.
        out_dir (str | None): also copy the logs (files ending in ``out_suffix``) to
            ``out_dir/<work_dir basename>`` after the run.
        out_suffix (str | tuple[str]): which files of the work_dir are logs.
        keep_local (bool): keep the work_dir copies after copying them to ``out_dir``.
        file_client_args (dict | None): accepted for mmcv configs; only local disk is supported.

    Fixes over mmcv: ``memory`` is the peak of the logged interval (mmcv printed the peak since
    the start of the run, so one large batch hid every later line's figure); the ETA averages
    the time of every iteration since the start (mmcv counted ``interval`` iterations per log
    line, which under-counts when an epoch's length is not a multiple of the interval).
    """

    def __init__(self, by_epoch=True, interval=10, ignore_last=True, reset_flag=False,
                 interval_exp_name=1000, out_dir=None, out_suffix=('.log.json', '.log', '.py'),
                 keep_local=True, file_client_args=None):
        super().__init__(interval, ignore_last, reset_flag, by_epoch)
        if out_dir is None and file_client_args is not None:
            raise ValueError('file_client_args should be None when out_dir is None, '
                             f'got {file_client_args!r}')
        if out_dir is not None and not isinstance(out_dir, str):
            raise TypeError(f'out_dir must be a str or None, got {out_dir!r}')
        check_local_file_client(file_client_args, 'TextLoggerHook')
        self.interval_exp_name = interval_exp_name
        self.out_dir = out_dir
        self.out_suffix = (out_suffix,) if isinstance(out_suffix, str) else tuple(out_suffix)
        self.keep_local = keep_local
        self.file_client_args = file_client_args
        self.time_sec_tot = 0.
        self.json_log_path = None

    def before_run(self, runner):
        super().before_run(runner)
        if self.out_dir is not None:
            self.out_dir = out_dir_for(self.out_dir, runner.work_dir)
            runner.logger.info(f'Text logs will be copied to {self.out_dir} after training.')
        self.start_iter = runner.iter
        self._timed_until = runner.iter  # iterations whose time is in time_sec_tot
        if runner.work_dir is not None:
            self.json_log_path = osp.join(runner.work_dir, f'{runner.timestamp}.log.json')
            if runner.meta is not None:
                self._dump_log(runner.meta, runner)

    def _get_max_memory(self, runner, device, mem_mb=None):
        """``mem_mb`` (default: the CUDA peak since the last line, in MiB, truncated as mmcv),
        reduced with MAX to rank 0: every rank logs the same iterations."""
        if mem_mb is None:
            mem_mb = torch.cuda.max_memory_allocated(device) / (1024 * 1024)
            torch.cuda.reset_peak_memory_stats(device)
        mem_mb = torch.tensor([mem_mb], dtype=torch.int, device=device)
        if runner.world_size > 1 and dist.is_available() and dist.is_initialized():
            dist.reduce(mem_mb, 0, op=dist.ReduceOp.MAX)
        return mem_mb.item()

    def _eta(self, log_dict, runner):
        """The mean time of this run's iterations times the iterations left. Left is counted
        from the position (epochs to go times the epoch's length): the iteration count of a
        run resumed with another batch size was made with another epoch length, and
        ``max_iters - iter`` went negative."""
        done = runner.iter + 1
        self.time_sec_tot += log_dict['time'] * max(done - self._timed_until, 0)
        self._timed_until = done
        time_sec_avg = self.time_sec_tot / max(done - self.start_iter, 1)
        eta_sec = time_sec_avg * _iters_left(runner)
        return str(datetime.timedelta(seconds=int(eta_sec)))

    def _log_info(self, log_dict, runner):
        if runner.meta is not None and 'exp_name' in runner.meta:
            if self.every_n_iters(runner, self.interval_exp_name) or (
                    self.by_epoch and self.end_of_epoch(runner)):
                runner.logger.info(f'Exp name: {runner.meta["exp_name"]}')

        if log_dict['mode'] == 'train':
            if isinstance(log_dict['lr'], dict):
                lr_str = ' '.join(f'lr_{k}: {v:.3e}' for k, v in log_dict['lr'].items())
            else:
                lr_str = f'lr: {log_dict["lr"]:.3e}'
            if self.by_epoch:
                log_str = (f'Epoch [{log_dict["epoch"]}]'
                           f'[{log_dict["iter"]}/{len(runner.data_loader)}]\t')
            else:
                log_str = f'Iter [{log_dict["iter"]}/{runner.max_iters}]\t'
            log_str += f'{lr_str}, '
            if 'time' in log_dict:
                log_str += f'eta: {self._eta(log_dict, runner)}, '
                log_str += (f'time: {log_dict["time"]:.3f}, '
                            f'data_time: {log_dict["data_time"]:.3f}, ')
                if 'memory' in log_dict:
                    log_str += f'memory: {log_dict["memory"]}, '
        else:
            # validation: Epoch(val) [4][<len of the val loader>] / Iter(val) [<len>]
            if self.by_epoch:
                log_str = f'Epoch({log_dict["mode"]}) [{log_dict["epoch"]}][{log_dict["iter"]}]\t'
            else:
                log_str = f'Iter({log_dict["mode"]}) [{log_dict["iter"]}]\t'

        items = []
        for name, val in log_dict.items():
            if name in _HEAD_KEYS:
                continue
            if isinstance(val, float):
                val = f'{val:.4f}'
            items.append(f'{name}: {val}')
        log_str += ', '.join(items)
        runner.logger.info(log_str)

    def _dump_log(self, log_dict, runner):
        if runner.rank != 0 or self.json_log_path is None:
            return
        json_log = OrderedDict((k, _round_float(v)) for k, v in log_dict.items())
        with open(self.json_log_path, 'a+') as f:
            f.write(json.dumps(json_log, default=_jsonable))
            f.write('\n')

    def log(self, runner):
        if 'eval_iter_num' in runner.log_buffer.output:
            # an evaluation hook says how many val iterations the results come from
            cur_iter = runner.log_buffer.output.pop('eval_iter_num')
        else:
            cur_iter = self.get_iter(runner, inner_iter=True)

        log_dict = OrderedDict(mode=self.get_mode(runner), epoch=self.get_epoch(runner),
                               iter=cur_iter)
        cur_lr = runner.current_lr()  # of the first param group only
        if isinstance(cur_lr, dict):
            log_dict['lr'] = {k: lrs[0] for k, lrs in cur_lr.items()}
        else:
            log_dict['lr'] = cur_lr[0]

        output = OrderedDict(runner.log_buffer.output)
        memory = output.pop('memory', None)  # a training line's head only, as mmcv
        if 'time' in output:
            device = cuda_device(runner.model)
            if memory is not None:
                log_dict['memory'] = self._get_max_memory(runner, device, memory)
            elif device is not None:
                log_dict['memory'] = self._get_max_memory(runner, device)

        log_dict = OrderedDict(log_dict, **output)
        for k, v in log_dict.items():
            if isinstance(v, numbers.Number) and not isinstance(v, (int, float)):
                log_dict[k] = v.item() if hasattr(v, 'item') else float(v)

        self._log_info(log_dict, runner)
        self._dump_log(log_dict, runner)
        return log_dict

    def after_run(self, runner):
        if self.out_dir is None or runner.rank != 0 or runner.work_dir is None:
            return
        os.makedirs(self.out_dir, exist_ok=True)
        out_abs = osp.abspath(self.out_dir)
        for root, _, files in os.walk(runner.work_dir):
            if osp.abspath(root) == out_abs or osp.abspath(root).startswith(out_abs + osp.sep):
                continue  # an out_dir inside the work_dir holds the copies
            for name in files:
                if not name.endswith(self.out_suffix):
                    continue
                local_path = osp.join(root, name)
                rel = osp.relpath(local_path, runner.work_dir)
                out_path = osp.join(self.out_dir, rel)
                if osp.abspath(out_path) == osp.abspath(local_path):
                    continue
                os.makedirs(osp.dirname(out_path), exist_ok=True)
                shutil.copyfile(local_path, out_path)
                runner.logger.info(f'The file {local_path} has been copied to {out_path}.')
                if not self.keep_local:
                    os.remove(local_path)
                    runner.logger.info(f'{local_path} was removed due to `keep_local=False`.')
