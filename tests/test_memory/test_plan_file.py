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
