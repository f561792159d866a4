"""memory_plan.json on resume: a file that is no plan is refused naming it and how to plan
again; a plan made for another budget or batch is said and replaced by a new plan."""
import copy
import json
import logging

import pytest
from mmengine.config import Config

from ckptzoo.apis import build_training, set_random_seed
from ckptzoo.apis import plan as planner
from ckptzoo.apis.plan import plan_training
from ckptzoo.memory.plan_file import PlanFileError, PlanResult, read_plan_file

from .test_planner import TINY

SAVED = dict(budget_bytes=50 * 10 ** 6, predicted_peak_bytes=1000, measured_peak_bytes=1000,
             plan={'backbone.layer1.0': 'full'}, segments=[], fp16=False, cumulative_iters=2,
             samples_per_gpu=2, configured=dict(fp16=False, cumulative_iters=1,
                                                samples_per_gpu=4))


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
        return PlanResult(**dict(SAVED, budget_bytes=budget, cumulative_iters=1,
                                 samples_per_gpu=4))
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
    (dict(memory_budget='40MB'), 'was made for memory_budget=47.7 MiB; the config now gives '
                                 'memory_budget=38.1 MiB: planning again'),
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
        result = plan_training(run, cfg, logger=logging.getLogger('test_plan_file'),
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
        result = plan_training(run, cfg, logger=logging.getLogger('test_plan_file'),
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

    from .test_shape_model import table_at
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
    from ckptzoo.memory.report import plan_table
    path = str(tmp_path / 'memory_plan.json')
    result = PlanResult.from_json(json.loads(json.dumps(bucketed())))
    assert [b.shape for b in result.buckets] == [(32, 32), (16, 24)]
    assert isinstance(result.buckets[1], Bucket) and result.buckets[1].segments == [['a', 'b']]
    write_plan_file(path, result)
    again = PlanResult.from_json(read_plan_file(path))
    assert again == result and again.cost_model == result.cost_model
    assert again.boxes_per_image == 3
    assert ShapeCostModel.from_dict(again.cost_model).shapes == [(8, 8), (32, 32)]
    text = plan_table(again)
    assert '32x32' in text and '16x24' in text and 'segments' in text
    assert 'batch shapes: the pipeline bound: the data is not on disk' in text
    # a single-plan file (no buckets) stays one and writes no bucket keys
    plain = PlanResult.from_json(read_plan_file_of(tmp_path, SAVED))
    assert plain.buckets is None and plain.cost_model is None
    assert set(plain.to_json()) == set(SAVED) | {'predicted_step_time', 'measured_step_time',
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
