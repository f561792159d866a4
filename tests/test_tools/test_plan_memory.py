"""tools/plan_memory.py refuses what it cannot use before the probe steps: an --out it cannot
write, a budget that is not a whole number of bytes, a box count that is no count; and it
plans before the data is on disk, on synthetic batches it names (tools/train.py does not)."""
import json
import os
import os.path as osp

import pytest
from tests.helpers.tools import load_tool

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
CONFIG = osp.join(ROOT, 'configs', 'smoke', 'classifier_synthetic.py')
COCO = osp.join(ROOT, 'configs', 'coco', 'retinanet_r50_fpn_1x_coco.py')
#: RetinaNet R50 on COCO cut down to a ResNet-18 of width 8 at 96x64 (96x96 batches)
TINY_COCO = ['model.backbone.init_cfg=None', 'model.backbone.depth=18',
             'model.backbone.base_channels=8', 'model.neck.in_channels=[8,16,32,64]',
             'model.neck.out_channels=16', 'model.bbox_head.in_channels=16',
             'model.bbox_head.feat_channels=16', 'model.bbox_head.stacked_convs=1',
             'data.train.pipeline.2.img_scale=(96,64)', 'data.workers_per_gpu=0']


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


def _missing_data(tmp_path):
    root = tmp_path / 'nowhere' / 'coco'
    ann = root / 'annotations' / 'instances_train2017.json'
    return ann, [f'data.train.ann_file={ann}', f'data.train.img_prefix={root}/train2017/']


def test_a_dataset_not_on_disk_is_planned_on_synthetic_batches(tmp_path, capsys):
    """COCO's RetinaNet with no COCO on disk: one line names the missing annotation file and
    the synthetic batches; the plan is made, and it grows with the boxes per image."""
    ann, options = _missing_data(tmp_path)
    peaks = {}
    for boxes in (1, 300):
        out = tmp_path / f'plan{boxes}.json'
        assert _tool().main([COCO, '--budget', '1GB', '--boxes', str(boxes), '--out', str(out),
                             '--work-dir', str(tmp_path), '--cfg-options'] + TINY_COCO +
                            options) == 0
        stdout = capsys.readouterr().out
        # GroupSampler batches landscape and portrait images apart: each orientation's bound
        # of the 96x64 scale, never 96x96
        line = (f'plan_memory: the training data is not on disk ({ann} not found): planning '
                f'on synthetic batches of 64x96 and 96x64 (one orientation per batch, as '
                f'GroupSampler batches them) with {boxes} boxes per image at '
                'samples_per_gpu=2')
        assert stdout.splitlines()[0] == line and 'measured peak' in stdout
        # the sizes are not known: the pipeline's bound, said once in the plan table
        assert stdout.count('batch shapes: Image sizes are unknown') == 1, stdout
        plan = json.loads(out.read_text())
        assert plan['samples_per_gpu'] == 2
        # what it was made for: tools/train.py on the real data plans again (plan_fit)
        made_for = plan['made_for']
        assert made_for['model']['units'][0] == 'backbone.stem'
        assert made_for['data']['from_data'] is False
        peaks[boxes] = plan['measured_peak_bytes']
    # the assigner's IoU matrix: 1161 anchors (64x96: 129 positions x 9) x 299 more boxes,
    # float32, per image in turn
    assert peaks[300] - peaks[1] >= 1161 * 299 * 4


def test_a_dataset_not_on_disk_without_a_bound_on_the_image_size(tmp_path):
    _, options = _missing_data(tmp_path)
    with pytest.raises(SystemExit, match=r'error: the training data is not on disk \(.*'
                       r'instances_train2017.json not found\), and the training pipeline gives '
                       r'no bound on the image size .* give it a Resize with an img_scale .*'
                       r'data.train.pipeline.2.img_scale='):
        _tool().main([COCO, '--budget', '1GB', '--cfg-options'] + TINY_COCO[:-2] + options +
                     ['data.train.pipeline.2.img_scale=None'])


@pytest.mark.parametrize('boxes', ['0', '-3', 'ten', '2.5'])
def test_a_bad_box_count_is_refused(boxes, capsys):
    with pytest.raises(SystemExit):
        _tool().parse_args([COCO, '--budget', '1GB', '--boxes', boxes])
    assert (f"argument --boxes: must be a positive whole number of boxes per image, got "
            f"{boxes!r}") in capsys.readouterr().err


def test_train_does_not_train_on_synthetic_batches(tmp_path):
    """tools/train.py on the same config: the missing file is an error naming it."""
    ann, options = _missing_data(tmp_path)
    with pytest.raises(FileNotFoundError) as info:
        load_tool('train.py').main([COCO, '--work-dir', str(tmp_path / 'work'),
                                    '--cfg-options'] + TINY_COCO + options)
    assert str(ann) in str(info.value)


def test_boxes_with_the_data_on_disk_is_said_to_be_for_synthetic_batches(monkeypatch, capsys):
    tool = _tool()

    def build_training(*args, **kwargs):
        raise SystemExit('built')
    monkeypatch.setattr(tool, 'build_training', build_training)
    with pytest.raises(SystemExit, match='built'):
        tool.main([CONFIG, '--budget', '6GB', '--boxes', '30'])
    assert capsys.readouterr().out == ('plan_memory: --boxes 30 is for synthetic batches; the '
                                       'training data is on disk and the probe steps on its '
                                       'own batches\n')


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


@pytest.mark.parametrize('options, message', [
    (['data.samples_per_gpus=2'],
     r"unknown config key 'data.samples_per_gpus' \(did you mean 'data.samples_per_gpu'"),
    (['runer.max_iters=1'], r"unknown config key 'runer' .*did you mean 'runner'\?"),
    (['lr_config.step=[3,1]'],
     r'lr_config: step must be .*strictly increasing positive ints.*got \[3, 1\]'),
    (['memory_budget=lots'], r"memory_budget must be a number of bytes .*, got 'lots'"),
], ids=['samples_per_gpus', 'runer', 'step', 'budget'])
def test_the_config_is_loaded_and_checked_as_train_loads_and_checks_it(tmp_path, options,
                                                                         message):
    """``load_config`` + ``check_config``, as tools/train.py: a typo'd key or a bad value (a
    budget included) fails with the message tools/train.py gives, before the probe."""
    argv = [CONFIG, '--cfg-options', 'memory_budget=50MB'] + options
    for tool, extra in (('train.py', ['--work-dir', str(tmp_path / 'train')]),
                        ('plan_memory.py', ['--work-dir', str(tmp_path / 'plan')])):
        with pytest.raises((Exception, SystemExit), match=message):
            load_tool(tool).main(argv + extra)
    assert not (tmp_path / 'plan').exists()


def test_pretrained_weights_that_are_not_here_are_left_out(tmp_path, capsys):
    """Weights do not change memory: a pretrained file that is missing is named in one line
    and the plan is made without it (it stopped planning with a traceback)."""
    _, options = _missing_data(tmp_path)
    missing = tmp_path / 'nowhere' / 'r18.pth'
    tiny = [o for o in TINY_COCO if not o.startswith('model.backbone.init_cfg')]
    out = tmp_path / 'plan.json'
    assert _tool().main([COCO, '--budget', '1GB', '--out', str(out), '--work-dir',
                         str(tmp_path), '--cfg-options'] + tiny + options
                        + [f'model.backbone.init_cfg.checkpoint={missing}']) == 0
    stdout = capsys.readouterr().out
    assert (f'plan_memory: planning without pretrained weights that are not here '
            f'(model.backbone.init_cfg: checkpoint file not found: {missing}): they do not '
            'change the memory a step needs') in stdout.splitlines()
    assert 'measured peak' in stdout and out.exists()
