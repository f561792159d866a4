"""The budget inside a gradient-accumulation window: the planner probes and validates the
window's largest iteration (the gradients of the iterations before it held from its start,
then the optimizer step), so a planned accumulating run holds its budget at every step, and a
probe whose step the loss scaler skips still counts the optimizer's state."""
import logging

import pytest
from mmengine.config import Config

from ckptzoo.apis import build_training, set_random_seed, train_model
from ckptzoo.apis.plan import plan_memory
from ckptzoo.memory import minimum_peak, predict_peak, uniform_plan
from ckptzoo.memory.plan_hook import MemoryPlanHook
from ckptzoo.memory.measure.probe import probe, probe_batch, probe_modes, worst_case_shape
from ckptzoo.memory.report.table import plan_table
from ckptzoo.memory.measure.step import optimizer_hook
from tests.helpers.configs import TINY


def _config(tmp_path, samples_per_gpu=4, cumulative_iters=1, **overrides):
    """TINY at 64 px (activations set the peak), 8 iterations."""
    data = dict(TINY['data'], samples_per_gpu=samples_per_gpu,
                train=dict(TINY['data']['train'], img_size=64, num_samples=32))
    return Config(dict(TINY, data=data, work_dir=str(tmp_path),
                       optimizer_config=dict(grad_clip=None, cumulative_iters=cumulative_iters),
                       runner=dict(type='IterBasedRunner', max_iters=8), **overrides))


def _table(tmp_path, **options):
    set_random_seed(0)
    cfg = _config(tmp_path, **options)
    run = build_training(cfg, logger=logging.getLogger('test_plan_window'))
    return probe(run, probe_batch(run, worst_case_shape(cfg)), modes=probe_modes(run))


def _train(cfg):
    """Train ``cfg`` as tools/train.py does (planned when it has a budget); the plan hook."""
    set_random_seed(0)
    from ckptzoo.apis.train import build_train_datasets, build_train_model
    runner = train_model(build_train_model(cfg), build_train_datasets(cfg), cfg,
                         logger=logging.getLogger('test_plan_window'))
    return next(h for h in runner.hooks if isinstance(h, MemoryPlanHook))


@pytest.mark.parametrize('cumulative_iters', [2, 4])
def test_a_planned_accumulating_run_holds_its_budget_at_every_step(tmp_path, cumulative_iters):
    """A budget halfway between the smallest and the plain peak of the accumulating run: every
    step of the run, measured with memory_check_interval=1, is within it, and the prediction is
    within 2 % of the largest step of the window (the later iterations hold the gradients)."""
    table = _table(tmp_path / 'probe', cumulative_iters=cumulative_iters)
    assert table.window == cumulative_iters
    plain = predict_peak(table, uniform_plan(table, None))
    budget = (minimum_peak(table).peak + plain) // 2
    cfg = _config(tmp_path / 'run', cumulative_iters=cumulative_iters, memory_budget=budget,
                  memory_check_interval=1)
    hook = _train(cfg)
    peaks = {r['iter']: r['peak_bytes'] for r in hook.records}
    assert sorted(peaks) == list(range(8))
    assert max(peaks.values()) <= budget, (peaks, budget)
    assert not hook.over_budget
    # after the first window (the optimizer state exists): the gradients held cost memory
    held = [peaks[i] for i in range(cumulative_iters, 8) if i % cumulative_iters]
    first = [peaks[i] for i in range(cumulative_iters, 8) if i % cumulative_iters == 0]
    assert min(held) > max(first)
    predicted = hook.buckets[0].predicted_peak_bytes
    assert abs(predicted - max(peaks.values())) <= 0.02 * max(peaks.values())


def test_the_outer_search_probes_each_option_at_its_own_window(tmp_path):
    """A budget that only a halved batch under 2-iteration accumulation reaches: the option's
    table is of its window's last iteration, and the run trained with it holds the budget at
    every step."""
    halved = _table(tmp_path / 'halved', samples_per_gpu=2, cumulative_iters=2)
    configured = _table(tmp_path / 'configured')
    assert halved.window == 2 and configured.window == 1
    low, high = minimum_peak(halved).peak, minimum_peak(configured).peak
    assert low < high
    budget = (low + high) // 2
    set_random_seed(0)
    cfg = _config(tmp_path / 'plan')
    run = build_training(cfg, logger=logging.getLogger('test_plan_window'))
    result, _ = plan_memory(run, cfg, budget)
    assert (result.cumulative_iters, result.samples_per_gpu) == (2, 2)
    assert result.table.window == 2
    assert 'iteration 2 of each accumulation window of 2' in plan_table(result)
    hook = _train(_config(tmp_path / 'run', memory_budget=budget, memory_check_interval=1))
    assert len(hook.records) == 8 and not hook.over_budget
    assert max(r['peak_bytes'] for r in hook.records) <= budget


def test_a_skipped_probe_step_still_counts_the_optimizer_state(tmp_path):
    """float16 with a loss scale that overflows every gradient: the loss scaler skips the
    probe's optimizer step, which then makes no momentum buffers; the probe counts them all
    the same, as every step after the run's first real one holds them."""
    set_random_seed(0)
    cfg = _config(tmp_path, fp16=dict(loss_scale=1e30))
    cfg.data.train.img_size = 32
    run = build_training(cfg, logger=logging.getLogger('test_plan_window'))
    optimizer_hook(run.runner).before_run(run.runner)  # the loss scaler, as in a run
    params = [p for p in run.runner.model.parameters() if p.requires_grad]
    table = probe(run, probe_batch(run, worst_case_shape(cfg)), modes=(None, ))
    assert run.runner.meta['fp16']['skipped_in_a_row'] >= 1  # the scaler skipped the step
    assert table.fixed['optimizer_state'] == sum(p.numel() * p.element_size() for p in params)
    assert all(run.runner.optimizer.state[p]['momentum_buffer'].shape == p.shape
               for p in params)


@pytest.mark.slow
def test_the_smallest_budget_an_infeasible_plan_names_is_trainable(tmp_path):
    """``configs/smoke/classifier_synthetic.py`` (float16, 2-iteration accumulation): the
    smallest budget that ``InfeasibleBudget`` names is one the run then trains within, every
    step measured (the outer search takes a halved batch under 4-iteration accumulation)."""
    import os.path as osp
    from ckptzoo.apis.config import load_config
    from ckptzoo.memory import InfeasibleBudget
    path = osp.join(osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__)))),
                    'configs', 'smoke', 'classifier_synthetic.py')

    def config(name, **options):
        cfg = load_config(path, dict(work_dir=str(tmp_path / name), **options))
        cfg.runner.max_epochs = 1
        return cfg
    set_random_seed(0)
    cfg = config('probe')
    with pytest.raises(InfeasibleBudget) as info:
        plan_memory(build_training(cfg, logger=logging.getLogger('test_plan_window')), cfg,
                    10 ** 6)
    smallest = info.value.minimum.peak
    hook = _train(config('run', memory_budget=smallest, memory_check_interval=1))
    assert len(hook.records) == 32 and not hook.over_budget
    assert max(r['peak_bytes'] for r in hook.records) <= smallest
