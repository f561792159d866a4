"""tools/plan_memory.py refuses what it cannot use before the probe steps: an --out it cannot
write, a budget that is not a whole number of bytes."""
import os
import os.path as osp

import pytest
from tests.tool_loader import load_tool

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
CONFIG = osp.join(ROOT, 'configs', 'smoke', 'classifier_synthetic.py')


def _tool():
    return load_tool('plan_memory.py')


@pytest.mark.parametrize('where', ['no folder', 'a directory', 'read-only', 'sweep'])
def test_out_that_cannot_be_written_fails_before_the_probe(tmp_path, where, capsys):
    args = ['--budget', '6GB']
    if where == 'no folder':
        out, problem = tmp_path / 'missing' / 'plan.json', f'the folder {tmp_path}/missing ' \
                                                            'does not exist'
    elif where == 'a directory':
        out, problem = tmp_path, 'it is a directory'
    elif where == 'read-only':
        if hasattr(os, 'geteuid') and os.geteuid() == 0:
            pytest.skip('root writes into read-only folders')
        (tmp_path / 'ro').mkdir()
        (tmp_path / 'ro').chmod(0o555)
        out, problem = tmp_path / 'ro' / 'plan.json', 'permission denied'
    else:
        (tmp_path / 'plan.png').mkdir()
        out, problem = tmp_path / 'plan.json', 'it is a directory'
        args.append('--sweep')
    with pytest.raises(SystemExit):
        _tool().parse_args([CONFIG, '--out', str(out)] + args)
    flag, path = ('--sweep', tmp_path / 'plan.png') if where == 'sweep' else ('--out', out)
    assert f'{flag}: cannot write {path}: {problem}' in capsys.readouterr().err


def test_a_budget_of_fractional_bytes_is_refused_before_the_probe(monkeypatch):
    tool = _tool()
    monkeypatch.setattr(tool, 'build_training', lambda *a, **k: pytest.fail('probed'))
    with pytest.raises(SystemExit, match=r"error: memory_budget '2.5' is 2.5 bytes, not a whole "
                       r"number: give a unit \('2.5GB', '2.5GiB'\)"):
        tool.main([CONFIG, '--budget', '2.5'])


@pytest.mark.parametrize('where', ['no folder', 'a directory'])
def test_a_report_that_cannot_be_written_fails_before_the_probe(tmp_path, where, capsys):
    if where == 'no folder':
        report, problem = tmp_path / 'missing' / 'r.html', \
            f'the folder {tmp_path}/missing does not exist'
    else:
        report, problem = tmp_path, 'it is a directory'
    with pytest.raises(SystemExit):
        _tool().parse_args([CONFIG, '--budget', '6GB', '--report', str(report)])
    assert f'--report: cannot write {report}: {problem}' in capsys.readouterr().err


def test_a_report_without_a_budget_says_what_to_pass(tmp_path, monkeypatch):
    tool = _tool()
    monkeypatch.setattr(tool, 'build_training', lambda *a, **k: pytest.fail('probed'))
    with pytest.raises(SystemExit, match=r'error: no budget: pass --budget 6GB or set '
                       r'memory_budget in the config \(--report draws a plan for a budget\)'):
        tool.main([CONFIG, '--report', str(tmp_path / 'r.html')])
    assert not (tmp_path / 'r.html').exists()
