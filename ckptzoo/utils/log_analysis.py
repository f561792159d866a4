"""Read the JSON-lines logs of :class:`~ckptzoo.runner.TextLoggerHook` and summarise them
(mmdet 2.x's ``tools/analysis_tools/analyze_logs.py``: ``plot_curve`` and ``cal_train_time``).

Fixes over mmdet: losses (per iteration) and evaluation metrics (per epoch) are drawn on
separate axes, one per key, each with labelled axes, instead of sharing one x axis in two
units; epochs with different numbers of log lines no longer break ``cal_train_time``; a bad
file or key names the problem.
"""
import json
import os.path as osp
from collections import OrderedDict, defaultdict

import numpy as np

__all__ = ['LogDict', 'load_json_logs', 'available_keys', 'cal_train_time', 'plot_curve']


class LogDict(OrderedDict):
    """``epoch -> {key: [values in log order]}`` (mmdet's structure); ``lines`` keeps every
    line whole, with its ``epoch``, since keys such as ``mAP`` appear only on some lines."""

    def __init__(self, path=None):
        super().__init__()
        self.path = path
        self.lines = []


def load_json_logs(json_logs):
    """One :class:`LogDict` per file: ``epoch -> {key: [values in log order]}``.

    The first line (the run's meta: config, env info) and lines without ``epoch`` are skipped,
    as mmdet. A line that is not a JSON object raises ``ValueError`` naming file and line.
    """
    if isinstance(json_logs, str):
        json_logs = [json_logs]
    log_dicts = []
    for json_log in json_logs:
        if not osp.isfile(json_log):
            raise FileNotFoundError(f'log file not found: {json_log}')
        log_dict = LogDict(json_log)
        with open(json_log) as f:
            for lineno, line in enumerate(f, start=1):
                if not line.strip():
                    continue
                try:
                    log = json.loads(line)
                except json.JSONDecodeError as e:
                    raise ValueError(f'{json_log} is not a JSON-lines log (one JSON object per '
                                     f'line, the .log.json of a run): line {lineno} is '
                                     f'{line.strip()[:60]!r} ({e.msg})') from None
                if not isinstance(log, dict):
                    raise ValueError(f'{json_log} line {lineno} is not a JSON object: '
                                     f'{line.strip()[:60]!r}')
                if lineno == 1 or 'epoch' not in log:
                    continue
                log_dict.lines.append(dict(log))
                epoch = log.pop('epoch')
                entry = log_dict.setdefault(epoch, defaultdict(list))
                for key, value in log.items():
                    entry[key].append(value)
        if not log_dict:
            raise ValueError(f'{json_log} has no training or evaluation lines (only the meta '
                             'line): was the run stopped before its first logging interval?')
        log_dicts.append(log_dict)
    return log_dicts


def available_keys(log_dict):
    """The plottable keys of one log: numeric values of any line."""
    keys = set()
    for entry in log_dict.values():
        for key, values in entry.items():
            if key not in ('mode', 'iter') and any(
                    isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
                keys.add(key)
    return sorted(keys)


def _lines(log_dict):
    return log_dict.lines


def _series(log_dict, key, start_epoch=1):
    """``(xs, ys, xlabel)`` for ``key``: training values against the global iteration,
    evaluation values against the epoch (by-epoch logs) or the iteration (iteration logs);
    lines of epochs before ``start_epoch`` are left out."""
    lines = [line for line in _lines(log_dict) if key in line and line['epoch'] >= start_epoch]
    train = [line for line in _lines(log_dict) if line.get('mode') == 'train']
    # by-epoch logs count iterations within the epoch: offset them by the epoch length (the
    # largest iteration logged in the first epoch, as mmdet); iteration logs count globally
    first_epoch = [line['iter'] for line in train if line['epoch'] == train[0]['epoch']] \
        if train else []
    per_epoch = max(first_epoch, default=0)
    by_epoch = any(b['iter'] < a['iter'] for a, b in zip(train, train[1:]))
    is_val = [line.get('mode') != 'train' for line in lines]
    if all(is_val) and by_epoch:
        return [line['epoch'] for line in lines], [line[key] for line in lines], 'epoch'
    xs, ys, last_iter = [], [], 0
    for line in _lines(log_dict):
        if line['epoch'] < start_epoch:
            continue
        if line.get('mode') == 'train':
            last_iter = (line['epoch'] - 1) * per_epoch + line['iter'] if by_epoch \
                else line['iter']
        if key in line:
            xs.append(last_iter)
            ys.append(line[key])
    return xs, ys, 'iter'


def plot_curve(log_dicts, keys, legend=None, title=None, out=None, json_logs=None,
               start_epoch=1, budgets=None):
    """One figure, one axes per key, one labelled line per log file; saved to ``out`` if given.
    The ``memory`` key (MiB, the peak of each logging interval) is drawn with the run's memory
    budget as a horizontal line, where ``budgets`` gives one.

    Args:
        log_dicts (list): from :func:`load_json_logs`.
        keys (list[str]): e.g. ``['loss_cls', 'loss_bbox', 'mAP']``.
        legend (list[str] | None): one label per log (default: the file names).
        json_logs (list[str] | None): the file names, for labels and messages.
        start_epoch (int): plot from this epoch on.
        budgets (list[int | None] | None): per log, its memory budget in bytes (the
            ``budget_bytes`` of its ``memory_plan.json``), drawn on the ``memory`` axes.
    Returns:
        matplotlib.figure.Figure
    """
    import matplotlib
    if out is not None:
        matplotlib.use('Agg', force=False)
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    if isinstance(keys, str):
        keys = [keys]
    if not keys:
        raise ValueError('give at least one key to plot')
    names = list(json_logs) if json_logs else [getattr(d, 'path', None) or f'run {i}'
                                               for i, d in enumerate(log_dicts)]
    if legend is None:
        legend = [osp.splitext(osp.splitext(osp.basename(n))[0])[0] for n in names]
        if len(set(legend)) < len(legend):  # same file name in different work_dirs
            legend = [osp.basename(osp.dirname(osp.abspath(n))) + '/' + lg
                      for n, lg in zip(names, legend)]
    if len(legend) != len(log_dicts):
        raise ValueError(f'--legend needs one label per log file ({len(log_dicts)}), '
                         f'got {len(legend)}: {legend}')
    budgets = list(budgets) if budgets is not None else [None] * len(log_dicts)
    if len(budgets) != len(log_dicts):
        raise ValueError(f'budgets needs one entry per log file ({len(log_dicts)}), got '
                         f'{len(budgets)}')
    for name, log_dict in zip(names, log_dicts):
        present = available_keys(log_dict)
        unknown = [k for k in keys if k not in present]
        if unknown:
            hint = (' (evaluation metrics need a run with validation, without --no-validate)'
                    if any('AP' in k for k in unknown) and not any('AP' in k for k in present)
                    else ' (memory is logged on CUDA, and on a CPU every '
                    'memory_check_interval-th step: this run set memory_check_interval = 0, '
                    'or ran fewer steps than the interval)' if 'memory' in unknown else '')
            raise KeyError(f'{name} has no key {", ".join(unknown)}{hint}; the keys present '
                           f'are: {", ".join(present)}')

    fig, axes = plt.subplots(len(keys), 1, figsize=(7, 2.6 * len(keys) + 0.6), squeeze=False)
    for ax, key in zip(axes[:, 0], keys):
        for label, log_dict in zip(legend, log_dicts):
            xs, ys, xlabel = _series(log_dict, key, start_epoch)
            style = dict(marker='o') if len(xs) < 30 else dict(linewidth=1)
            ax.plot(xs, ys, label=label, **style)
        ax.set_xlabel(xlabel)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_ylabel(key)
        if key == 'memory':
            ax.set_ylabel('memory (MiB)')
            drawn = {}
            for label, budget in zip(legend, budgets):
                if budget is not None:
                    drawn.setdefault(budget, []).append(label)
            for budget, labels in drawn.items():
                run = '' if len(drawn) == 1 else ' (' + ', '.join(labels) + ')'
                ax.axhline(budget / 2 ** 20, color='tab:red', linestyle='--', linewidth=1.2,
                           label=f'budget {budget / 2 ** 20:.0f} MiB{run}')
        ax.grid(True, alpha=0.3)
        ax.legend()
    if title is not None:
        fig.suptitle(title)
    fig.tight_layout()
    if out is not None:
        fig.savefig(out, dpi=100)
        plt.close(fig)
    return fig


def cal_train_time(log_dicts, include_outliers=False):
    """Per log: ``dict(slowest_epoch, slowest_time, fastest_epoch, fastest_time, std,
    average)`` of the ``time`` per iteration of the training lines (seconds). The first line
    of each epoch (data loader start-up) is left out unless ``include_outliers``."""
    stats = []
    for log_dict in log_dicts:
        per_epoch = OrderedDict()
        for line in log_dict.lines:
            if line.get('mode') == 'train' and 'time' in line:
                per_epoch.setdefault(line['epoch'], []).append(line['time'])
        epochs, means, all_times = [], [], []
        for epoch, times in per_epoch.items():
            if not include_outliers:
                times = times[1:]
            if times:
                epochs.append(epoch)
                means.append(float(np.mean(times)))
                all_times.extend(times)
        if not all_times:
            raise KeyError('no iteration times in the log: reduce log_config.interval so that '
                           'each epoch logs at least two lines (or pass --include-outliers)')
        means = np.array(means)
        stats.append(dict(slowest_epoch=epochs[int(means.argmax())], slowest_time=means.max(),
                          fastest_epoch=epochs[int(means.argmin())], fastest_time=means.min(),
                          std=float(means.std()), average=float(np.mean(all_times))))
    return stats
