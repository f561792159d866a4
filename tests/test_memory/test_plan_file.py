"""memory_plan.json on resume: a file that is no plan is refused naming it and how to plan
again; a plan made for another budget, batch, model or data is said and replaced by a new
plan; a plan file that cannot be written fails before any probe step."""
import copy
import json
import logging
import os
import re

import pytest
from mmengine.config import Config

from ckptzoo.apis import build_training, set_random_seed
from ckptzoo.apis import plan as planner
from ckptzoo.apis.plan import plan_training
from ckptzoo.memory.plan_file import PlanFileError, PlanResult, read_plan_file

from tests.helpers.configs import TINY
from tests.helpers.plans import SAVED

#: TINY's checkpoint units: a plan file names every unit of its model
@pytest.fixture
def run(tmp_path):
    set_random_seed(0)
    cfg = Config(dict(TINY, work_dir=str(tmp_path), memory_budget='50MB'))
    return cfg, build_training(cfg, logger=logging.getLogger('test_plan_file'))


@pytest.fixture
def replans(monkeypatch):
    """plan_memory's calls, each answered with SAVED's plan at the options as configured."""
    calls = []

    def fake(run, cfg, budget, logger=None, **kwargs):
        calls.append(budget)
        return planner.PlannedRun(PlanResult(**dict(SAVED, budget_bytes=budget,
                                                    cumulative_iters=1, samples_per_gpu=4)),
                                  run)
    monkeypatch.setattr(planner, 'plan_memory', fake)
    return calls


@pytest.mark.parametrize('text,problem', [
    ('{"budget_bytes": 5', 'it is not valid JSON'),
    ('', 'it is not valid JSON'),
    ('[1, 2]', 'a JSON list, not an object'),
    ('{"checkpoint": "epoch_1.pth"}', 'no budget_bytes, predicted_peak_bytes'),
    (json.dumps(dict(SAVED, plan={'backbone.stem': 'fast'})), "unknown mode 'fast' in plan"),
    (json.dumps(dict(SAVED, samples_per_gpu=0)), 'samples_per_gpu must be a positive int'),
])
def test_a_file_that_is_no_plan_is_refused(run, replans, text, problem):
    cfg, run = run
    path = f'{cfg.work_dir}/memory_plan.json'
    with open(path, 'w') as f:
        f.write(text)
    with pytest.raises(PlanFileError) as info:
        plan_training(run, cfg, resume=True)
    message = str(info.value)
    assert message.startswith(f'{path} is not a memory plan') and problem in message
    assert f'delete {path} to plan again' in message
    assert f'python tools/plan_memory.py CONFIG --out {path}' in message
    assert not replans


@pytest.mark.parametrize('change,said', [
    (dict(memory_budget='40MB'), 'was made for memory_budget=50 MB (47.7 MiB); the config now '
                                 'gives memory_budget=40 MB (38.1 MiB): planning again'),
    (dict(data=dict(TINY['data'], samples_per_gpu=8)),
     'was made for samples_per_gpu=4; the config now gives samples_per_gpu=8'),
    (dict(optimizer_config=dict(grad_clip=None, cumulative_iters=2)),
     'was made for cumulative_iters=1; the config now gives cumulative_iters=2'),
])
def test_a_plan_for_another_budget_or_batch_is_said_and_made_again(run, replans, caplog,
                                                                     change, said):
    cfg, run = run
    with open(f'{cfg.work_dir}/memory_plan.json', 'w') as f:
        json.dump(SAVED, f)
    cfg.merge_from_dict(change)
    with caplog.at_level(logging.WARNING, logger='test_plan_file'):
        result, _ = plan_training(run, cfg, logger=logging.getLogger('test_plan_file'),
                                  resume=True)
    assert said in caplog.text and len(replans) == 1
    assert result.samples_per_gpu == 4 and cfg.data.samples_per_gpu == 4  # the new plan's
    saved = read_plan_file(f'{cfg.work_dir}/memory_plan.json')
    assert saved['budget_bytes'] == replans[0] and saved['samples_per_gpu'] == 4


def test_an_unchanged_config_reuses_the_plan(run, replans, caplog):
    cfg, run = run
    with open(f'{cfg.work_dir}/memory_plan.json', 'w') as f:
        json.dump(SAVED, f)
    with caplog.at_level(logging.INFO, logger='test_plan_file'):
        result, _ = plan_training(run, cfg, logger=logging.getLogger('test_plan_file'),
                                  resume=True)
    assert 'memory plan: reusing' in caplog.text and not replans
    assert (result.samples_per_gpu, result.cumulative_iters) == (2, 2)  # the saved plan's


def test_a_plan_file_without_configured_options_compares_the_batch_per_step(run, replans):
    cfg, run = run
    old = {k: v for k, v in SAVED.items() if k != 'configured'}
    with open(f'{cfg.work_dir}/memory_plan.json', 'w') as f:
        json.dump(old, f)  # 2 x 2: the outer search's form of the configured 4 x 1
    changed = copy.deepcopy(cfg)
    plan_training(run, cfg, resume=True)
    assert not replans
    changed.data.samples_per_gpu = 8
    with pytest.warns(UserWarning, match=r'samples_per_gpu x cumulative_iters=4; the config '
                      r'now gives samples_per_gpu x cumulative_iters=8'):
        plan_training(run, changed, resume=True)
    assert len(replans) == 1


# ------------------------------------------------------------------------------------------
# a plan per batch-shape bucket
# ------------------------------------------------------------------------------------------
def bucketed():
    """SAVED planned per batch shape: the top-level plan is the largest bucket's."""
    from ckptzoo.memory import ShapeCostModel

    from tests.helpers.plans import table_at
    model = ShapeCostModel({(8, 8): table_at(64, modes=(None, )), (32, 32): table_at(1024)})
    return dict(SAVED, buckets=[
        dict(shape=[32, 32], plan=SAVED['plan'], segments=[], predicted_peak_bytes=1000,
             predicted_step_time=0.5, measured_peak_bytes=990),
        dict(shape=[16, 24], plan={'backbone.layer1.0': None}, segments=[['a', 'b']],
             predicted_peak_bytes=600, predicted_step_time=0.25, measured_peak_bytes=None)],
        boxes_per_image=3, shapes_note='the pipeline bound: the data is not on disk',
        cost_model=model.to_dict())


def test_a_bucketed_plan_round_trips(tmp_path):
    from ckptzoo.memory import Bucket, ShapeCostModel
    from ckptzoo.memory.plan_file import write_plan_file
    from ckptzoo.memory.report.table import plan_table
    path = str(tmp_path / 'memory_plan.json')
    result = PlanResult.from_dict(json.loads(json.dumps(bucketed())))
    assert [b.shape for b in result.buckets] == [(32, 32), (16, 24)]
    assert isinstance(result.buckets[1], Bucket) and result.buckets[1].segments == [['a', 'b']]
    write_plan_file(path, result)
    again = PlanResult.from_dict(read_plan_file(path))
    assert again == result and again.cost_model == result.cost_model
    assert again.boxes_per_image == 3
    assert ShapeCostModel.from_dict(again.cost_model).shapes == [(8, 8), (32, 32)]
    text = plan_table(again)
    assert '32x32' in text and '16x24' in text and 'segments' in text
    assert 'batch shapes: the pipeline bound: the data is not on disk' in text
    # a single-plan file (no buckets) stays one and writes no bucket keys
    plain = PlanResult.from_dict(read_plan_file_of(tmp_path, SAVED))
    assert plain.buckets is None and plain.cost_model is None
    assert set(plain.to_dict()) == set(SAVED) | {'predicted_step_time', 'measured_step_time',
                                                 'margin', 'replans'}
    assert '16x24' not in plan_table(plain) and 'batch shapes' not in plan_table(plain)


def read_plan_file_of(tmp_path, data):
    path = str(tmp_path / 'plan.json')
    with open(path, 'w') as f:
        json.dump(data, f)
    return read_plan_file(path)


def _bucket_edit(i, **change):
    def edit(data):
        data['buckets'][i].update(change)
        return data
    return edit


@pytest.mark.parametrize('edit,problem', [
    (_bucket_edit(1, shape=[16]), r'buckets\[1\].shape must be \[H, W\] with positive ints, '
                                  r'got \[16\]'),
    (_bucket_edit(0, shape=[0, 5]), r'buckets\[0\].shape must be \[H, W\]'),
    (_bucket_edit(1, plan={'x': 'fast'}), r"unknown mode 'fast' in buckets\[1\].plan"),
    (_bucket_edit(1, segments=[['a']]), r'buckets\[1\].segments must be \[first unit, last '
                                        r'unit\] pairs'),
    (_bucket_edit(0, predicted_peak_bytes=1.5), r'buckets\[0\].predicted_peak_bytes must be a '
                                                r'non-negative int, got 1.5'),
    (_bucket_edit(0, measured_peak_bytes=-1), r'buckets\[0\].measured_peak_bytes must be'),
    (_bucket_edit(0, predicted_step_time='fast'), r'buckets\[0\].predicted_step_time must be a number >= 0, got .fast.'),
    (lambda d: dict(d, buckets=[]), 'buckets must be a non-empty list'),
    (lambda d: dict(d, buckets=[3]), r'buckets\[0\] must be an object, got 3'),
    (lambda d: dict(d, boxes_per_image='3'), 'boxes_per_image must be a non-negative int'),
    (lambda d: dict(d, shapes_note=7), 'shapes_note must be a string'),
    (lambda d: dict(d, cost_model=dict(tables={'8x8': {}})),
     'cost_model is not a cost model of batch shapes'),
    (lambda d: dict(d, cost_model=dict(tables={'big': {}})),
     'cost_model is not a cost model of batch shapes .*"HxW"'),
])
def test_a_corrupt_bucket_is_refused(tmp_path, edit, problem):
    path = str(tmp_path / 'memory_plan.json')
    with open(path, 'w') as f:
        json.dump(edit(bucketed()), f)
    with pytest.raises(PlanFileError, match=f'^{path} is not a memory plan of ckptzoo: '
                                            f'{problem}'):
        read_plan_file(path)


# ------------------------------------------------------------------------------------------
# the model and the data a plan was made for
# ------------------------------------------------------------------------------------------
def _tiny(tmp_path, **backbone):
    set_random_seed(0)
    cfg = Config(dict(TINY, work_dir=str(tmp_path), memory_budget='50MB'))
    cfg.model.backbone.update(backbone)
    return cfg, build_training(cfg, logger=logging.getLogger('test_plan_file'))


def _plan_file_for(cfg, run, path, **edits):
    """SAVED as the planner writes it for ``run``: every unit in the plan, ``made_for``."""
    units = list(run.runner.model.checkpoint_units())
    data = dict(SAVED, plan={**dict.fromkeys(units), units[1]: 'full'}, **edits)
    data['made_for'] = planner.plan_made_for(run, cfg, data['samples_per_gpu'])
    with open(path, 'w') as f:
        json.dump(data, f)
    return data


@pytest.mark.parametrize('made_for,now,said', [
    (dict(depth=18), dict(depth=34),
     r"model: 8 checkpoint units differ \(9 in the plan, 17 in the model\): 8 of the model's "
     r"are not in the plan \(backbone.layer1.2, backbone.layer2.2, backbone.layer2.3 and 5 "
     r"more\): planning again"),
    (dict(depth=34), dict(depth=18),  # was a raw KeyError on backbone.layer1.2
     r"model: 8 checkpoint units differ \(17 in the plan, 9 in the model\): 8 of the plan's "
     r"are not in the model \(backbone.layer1.2, "),
    (dict(base_channels=8), dict(base_channels=16),
     r'model: the parameters differ \(their names, shapes or dtypes.*the checkpoint units '
     r'are the same'),
])
def test_a_plan_of_another_model_is_said_and_made_again(tmp_path, replans, caplog, made_for,
                                                        now, said):
    path = f'{tmp_path}/memory_plan.json'
    _plan_file_for(*_tiny(tmp_path, **made_for), path)
    cfg, run = _tiny(tmp_path, **now)
    with caplog.at_level(logging.WARNING, logger='test_plan_file'):
        plan_training(run, cfg, logger=logging.getLogger('test_plan_file'), resume=True)
    assert re.search(f'memory plan: {re.escape(path)} was made for another model or other '
                     f'data: {said}', caplog.text), caplog.text
    assert len(replans) == 1  # planned again, and the new file records this model
    saved = read_plan_file(path)
    assert saved['made_for']['model']['units'] == list(run.runner.model.checkpoint_units())


def test_a_plan_of_this_model_and_data_is_reused(tmp_path, replans, caplog):
    cfg, run = _tiny(tmp_path)
    path = f'{tmp_path}/memory_plan.json'
    written = _plan_file_for(cfg, run, path)
    with caplog.at_level(logging.INFO, logger='test_plan_file'):
        result, _ = plan_training(run, cfg, logger=logging.getLogger('test_plan_file'),
                                  resume=True)
    assert 'memory plan: reusing' in caplog.text and not replans
    assert result.plan == written['plan'] and result.made_for == written['made_for']
    assert read_plan_file(path)['made_for'] == written['made_for']  # kept on rewriting


def test_a_plan_file_without_made_for_is_checked_on_its_unit_names(tmp_path, replans,
                                                                    caplog):
    """Files written before ``made_for``: the same units are reused with a note, others are
    planned again."""
    cfg, run = _tiny(tmp_path)
    path = f'{tmp_path}/memory_plan.json'
    with open(path, 'w') as f:
        json.dump(SAVED, f)  # TINY's units
    log = logging.getLogger('test_plan_file')
    with caplog.at_level(logging.INFO, logger='test_plan_file'):
        plan_training(run, cfg, logger=log, resume=True)
    assert not replans and 'memory plan: reusing' in caplog.text
    assert f'{path} does not record the model and data it was made for' in caplog.text
    cfg, run = _tiny(tmp_path, depth=34)
    with open(path, 'w') as f:
        json.dump(SAVED, f)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger='test_plan_file'):
        plan_training(run, cfg, logger=log, resume=True)
    assert len(replans) == 1
    assert "model: 8 checkpoint units differ (9 in the plan, 17 in the model)" in caplog.text


def test_a_plan_for_other_data_is_said_and_made_again(tmp_path, replans, caplog):
    """The same config on images of another size (the annotations changed): the plan's
    predictions are for batches the loader no longer gives."""
    from tests.helpers.configs import tiny_voc_retinanet
    log = logging.getLogger('test_plan_file')
    runs = {}
    for size in (64, 96):
        cfg = tiny_voc_retinanet(tmp_path / str(size), size=size)
        cfg.work_dir, cfg.memory_budget = str(tmp_path / 'work'), '50MB'
        set_random_seed(0)
        runs[size] = cfg, build_training(cfg, logger=log)
    path = f'{tmp_path}/work/memory_plan.json'
    options = dict(fp16=False, cumulative_iters=1, samples_per_gpu=2)  # as configured
    _plan_file_for(*runs[64], path, configured=options, **options)
    with caplog.at_level(logging.INFO, logger='test_plan_file'):
        plan_training(runs[64][1], runs[64][0], logger=log, resume=True)
    assert 'memory plan: reusing' in caplog.text and not replans
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger='test_plan_file'):
        plan_training(runs[96][1], runs[96][0], logger=log, resume=True)
    assert len(replans) == 1
    assert re.search(r'was made for another model or other data: data: the image sizes '
                     r'changed \(4 images now, 4 when planned\); the largest batch shape is '
                     r'96x96 now, 64x64 when planned', caplog.text), caplog.text
    made = read_plan_file(path)['made_for']['data']
    assert made['largest'] == [96, 96] and made['from_data']


def test_data_changes_name_the_box_counts_and_the_groups():
    from ckptzoo.memory.plan_fit import fit_changes
    model = dict(units=['a'], params='p')
    data = dict(from_data=True, largest=[64, 96], groups=[[0, 64, 48], [1, 48, 96]],
                max_boxes_per_image=3, max_boxes_per_batch=5, images=8, image_sizes='s')
    saved = dict(SAVED, made_for=dict(model=model, data=data))
    now = dict(model=model, data=dict(data, groups=[[0, 64, 40], [1, 48, 96]],
                                      max_boxes_per_image=12, max_boxes_per_batch=20))
    assert fit_changes(saved, now) == [
        'data: the largest batch shapes of the sampler groups are 64x40 (flag 0), 48x96 '
        '(flag 1) now, 64x48 (flag 0), 48x96 (flag 1) when planned; the most ground-truth '
        'boxes per image is 12 now, 3 when planned; the most ground-truth boxes per batch is '
        '20 now, 5 when planned']
    assert fit_changes(saved, dict(model=model, data=data)) == []


@pytest.mark.parametrize('name', ['memory_plan.json', 'memory_report.html'])
@pytest.mark.parametrize('resume', [False, True])
def test_a_plan_file_path_that_cannot_be_written_fails_before_the_probe(run, replans, name,
                                                                        resume):
    cfg, run = run
    path = f'{cfg.work_dir}/{name}'
    os.mkdir(path)
    with pytest.raises(OSError, match=f"cannot write the memory plan's file {re.escape(path)}: "
                                      f"it is a directory; a run with memory_budget writes "
                                      f"it into the work dir"):
        plan_training(run, cfg, resume=resume)
    assert not replans  # nothing probed


def test_an_accumulating_plan_probed_without_the_windows_gradients_is_made_again(
        tmp_path, replans, caplog):
    """A plan of ``cumulative_iters`` 2 whose cost tables do not say they were probed at a
    window's last iteration (an earlier version probed a step without the gradients that
    window holds, and under-predicted) is planned again; one that says so is reused."""
    from ckptzoo.memory.measure.probe import probe, probe_batch, worst_case_shape
    from ckptzoo.memory.model.shape_model import ShapeCostModel
    cfg, run = _tiny(tmp_path)
    table = probe(run, probe_batch(run, worst_case_shape(cfg)), modes=(None, ))
    table.window = 2
    cost_model = ShapeCostModel({(48, 48): table}).to_dict()
    path = f'{tmp_path}/memory_plan.json'
    _plan_file_for(cfg, run, path, cost_model=cost_model)
    log = logging.getLogger('test_plan_file')
    with caplog.at_level(logging.INFO, logger='test_plan_file'):
        plan_training(run, cfg, logger=log, resume=True)
    assert not replans and 'memory plan: reusing' in caplog.text
    del cost_model['tables']['48x48']['window']
    cfg, run = _tiny(tmp_path)  # the reuse set the plan's options in the first cfg
    _plan_file_for(cfg, run, path, cost_model=cost_model)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger='test_plan_file'):
        plan_training(run, cfg, logger=log, resume=True)
    assert len(replans) == 1
    assert (f'memory plan: {path} plans gradient accumulation (cumulative_iters=2) without '
            'the gradients that the iterations of a window hold from their start') in caplog.text
