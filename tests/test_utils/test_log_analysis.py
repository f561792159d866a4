"""Log analysis (plot_curve, cal_train_time) on JSON logs shaped as TextLoggerHook writes them,
and tools/analysis_tools/analyze_logs.py on top of it."""
import json
import os.path as osp

import matplotlib
import numpy as np
import pytest
from PIL import Image

from ckptzoo.utils.log_analysis import cal_train_time, load_json_logs, plot_curve
from tests.tool_loader import load_tool

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
