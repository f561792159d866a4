"""Log analysis (plot_curve, cal_train_time) on JSON logs shaped as TextLoggerHook writes them,
and tools/analysis_tools/analyze_logs.py on top of it."""
import json
import os.path as osp

import matplotlib
import numpy as np
import pytest
from PIL import Image

from ckptzoo.utils.log_analysis import cal_train_time, load_json_logs, plot_curve
from tests.helpers.tools import load_tool

matplotlib.use('Agg')

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))


def _write_log(path, loss0, times):
    """2 epochs of 10 iterations, logged every 4 (iters 4, 8), evaluated after each epoch."""
    lines = [dict(env_info='torch', config='...', seed=0)]
    for epoch in (1, 2):
        for k, it in enumerate((4, 8)):
            lines.append(dict(mode='train', epoch=epoch, iter=it, lr=0.01,
                              loss_cls=loss0 / (epoch * 2 + k), loss=2 * loss0 / (epoch + k),
                              time=times[epoch - 1][k], data_time=0.01))
        lines.append(dict(mode='val', epoch=epoch, iter=5, lr=0.01, mAP=0.5 * epoch,
                          AP50=0.5 * epoch))
    with open(path, 'w') as f:
        f.write('\n'.join(json.dumps(line) for line in lines) + '\n')
    return str(path)


@pytest.fixture
def two_logs(tmp_path):
    (tmp_path / 'a').mkdir()
    (tmp_path / 'b').mkdir()
    return [_write_log(tmp_path / 'a' / '1.log.json', 1.0, [[0.5, 0.2], [0.3, 0.4]]),
            _write_log(tmp_path / 'b' / '1.log.json', 3.0, [[0.5, 0.1], [0.3, 0.1]])]


def test_plot_curve_two_runs_one_figure(two_logs, tmp_path):
    out = str(tmp_path / 'curves.png')
    fig = plot_curve(load_json_logs(two_logs), ['loss_cls', 'mAP'], json_logs=two_logs,
                     out=out)
    axes = fig.axes
    assert [ax.get_ylabel() for ax in axes] == ['loss_cls', 'mAP']
    assert [ax.get_xlabel() for ax in axes] == ['iter', 'epoch']
    for ax in axes:  # one line per run, labelled by its work_dir (the file names are equal)
        assert [line.get_label() for line in ax.get_lines()] == ['a/1', 'b/1']
    loss_a = axes[0].get_lines()[0]
    np.testing.assert_array_equal(loss_a.get_xdata(), [4, 8, 12, 16])  # epoch 2 after 8
    np.testing.assert_allclose(loss_a.get_ydata(), [1 / 2, 1 / 3, 1 / 4, 1 / 5])
    map_b = axes[1].get_lines()[1]
    np.testing.assert_array_equal(map_b.get_xdata(), [1, 2])
    np.testing.assert_allclose(map_b.get_ydata(), [0.5, 1.0])
    with Image.open(out) as img:  # 7 x (2.6 * 2 + 0.6) inches at 100 dpi
        assert img.size == (700, 580)
    later = plot_curve(load_json_logs(two_logs), ['loss_cls'], start_epoch=2).axes[0]
    np.testing.assert_array_equal(later.get_lines()[0].get_xdata(), [12, 16])


def test_cal_train_time(two_logs):
    stats = cal_train_time(load_json_logs(two_logs))
    assert stats[0]['slowest_epoch'] == 2 and stats[0]['fastest_epoch'] == 1
    assert stats[0]['average'] == pytest.approx(0.3)  # 0.2 and 0.4, first of each left out
    assert stats[0]['std'] == pytest.approx(0.1)
    everything = cal_train_time(load_json_logs(two_logs[:1]), include_outliers=True)
    assert everything[0]['average'] == pytest.approx(np.mean([0.5, 0.2, 0.3, 0.4]))


def test_not_json_lines(tmp_path):
    path = tmp_path / 'train.log'
    path.write_text('{"env_info": "x"}\n2024-01-01 12:00 - ckptzoo - INFO - Epoch [1][4/10]\n')
    with pytest.raises(ValueError, match=r'not a JSON-lines log.*line 2'):
        load_json_logs([str(path)])


def test_unknown_key_lists_the_keys_present(two_logs):
    with pytest.raises(KeyError, match='1.log.json has no key bbox_mAP; the keys present '
                                       'are: AP50, data_time, loss, loss_cls, lr, mAP, time'):
        plot_curve(load_json_logs(two_logs), ['loss_cls', 'bbox_mAP'])
    with pytest.raises(KeyError, match='has no key memory .memory is logged on CUDA, and on a '
                                       'CPU every memory_check_interval-th step'):
        plot_curve(load_json_logs(two_logs), ['memory'])


def _tool():
    return load_tool('analysis_tools/analyze_logs.py')


def test_command_line(two_logs, tmp_path, capsys):
    tool = _tool()
    out = str(tmp_path / 'c.png')
    tool.main(['plot_curve', *two_logs, '--keys', 'loss', '--legend', 'x', 'y', '--out', out])
    assert osp.getsize(out) > 0
    tool.main(['cal_train_time', two_logs[0]])
    assert 'average iter time: 0.3000 s/iter' in capsys.readouterr().out
    with pytest.raises(SystemExit, match='no key los; the keys present are'):
        tool.main(['plot_curve', two_logs[0], '--keys', 'los', '--out', out])


def _memory_log(folder, memory):
    """A run's JSON log as TextLoggerHook writes it, with the peak ``memory`` (MiB) of each
    logging interval."""
    folder.mkdir(exist_ok=True)
    lines = [dict(env_info='torch', config='...', seed=0)]
    lines += [dict(mode='train', epoch=1, iter=4 * (k + 1), lr=0.01, memory=m, loss=1.0 / (k + 1),
                   time=0.3, data_time=0.01) for k, m in enumerate(memory)]
    path = folder / '20240101_000000.log.json'
    path.write_text('\n'.join(json.dumps(line) for line in lines) + '\n')
    return str(path)


def _budget_lines(ax):
    return [(line.get_label(), list(line.get_ydata())) for line in ax.get_lines()
            if line.get_label().startswith('budget')]


def test_memory_with_the_budget_of_the_plan_beside_the_log(tmp_path, monkeypatch):
    """``--keys memory`` draws the logged MiB and the run's budget: the ``budget_bytes`` of its
    ``memory_plan.json``, or ``--budget``; a run without a plan has no budget line."""
    planned = _memory_log(tmp_path / 'planned', [2900, 3010, 2950])
    (tmp_path / 'planned' / 'memory_plan.json').write_text(json.dumps(dict(
        budget_bytes=3 * 2 ** 30, predicted_peak_bytes=1, measured_peak_bytes=1, plan={},
        segments=[], fp16=False, cumulative_iters=1, samples_per_gpu=2)))
    plain = _memory_log(tmp_path / 'plain', [4100, 4200, 4150])
    tool = _tool()
    figures = []
    monkeypatch.setattr(tool, 'plot_curve',
                        lambda *a, **k: figures.append(plot_curve(*a, **k)))
    out = tmp_path / 'memory.png'
    tool.main(['plot_curve', planned, plain, '--keys', 'memory', '--out', str(out)])
    with Image.open(out) as img:
        assert img.size == (700, 320)
    ax = figures[0].axes[0]
    assert ax.get_ylabel() == 'memory (MiB)'
    np.testing.assert_array_equal(ax.get_lines()[0].get_ydata(), [2900, 3010, 2950])
    assert _budget_lines(ax) == [('budget 3072 MiB', [3072, 3072])]
    tool.main(['plot_curve', plain, '--keys', 'memory', '--budget', '6GB', '--out', str(out)])
    assert _budget_lines(figures[1].axes[0]) == [(f'budget {6e9 / 2 ** 20:.0f} MiB',
                                                  [6e9 / 2 ** 20] * 2)]
    tool.main(['plot_curve', plain, '--keys', 'memory', 'loss', '--out', str(out)])
    assert _budget_lines(figures[2].axes[0]) == [] and figures[2].axes[1].get_ylabel() == 'loss'


def test_memory_budget_errors(tmp_path):
    log = _memory_log(tmp_path / 'run', [100])
    tool = _tool()
    out = str(tmp_path / 'm.png')
    with pytest.raises(SystemExit, match=r'--budget is drawn on the memory curve: add memory '
                                         r'to --keys \(got loss\)'):
        tool.main(['plot_curve', log, '--keys', 'loss', '--budget', '6GB', '--out', out])
    with pytest.raises(SystemExit, match=r"memory_budget must be .*, got '6 gigs'"):
        tool.main(['plot_curve', log, '--keys', 'memory', '--budget', '6 gigs', '--out', out])
    (tmp_path / 'run' / 'memory_plan.json').write_text('{"budget_bytes": ')
    with pytest.raises(SystemExit, match=r'memory_plan.json is not a memory plan: it is not '
                                         r'valid JSON'):
        tool.main(['plot_curve', log, '--keys', 'memory', '--out', out])
