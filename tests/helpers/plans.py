"""Hand-made cost tables and plan results for the planner tests."""
from ckptzoo.memory import CostTable, UnitCost


FIXED = dict(parameters=1000, gradients=1000, optimizer_state=2000)


def table_at(p, modes=(None, 'full', 'selective')):
    """Three units whose activations are ``a + b * p`` bytes, the weights constant."""
    def per_mode(a, b):
        scale = {None: 1, 'full': 0.25, 'selective': 0.5}
        return {m: int((a + b * p) * scale[m]) for m in modes}
    units = [UnitCost(f'u{i}', kept=per_mode(8, 4 * (i + 1)), fwd_peak=per_mode(16, 6),
                      bwd_peak=per_mode(4, 8), fwd_time=0.001 * p,
                      recompute_time={m: 0.0005 * p for m in modes if m == 'selective'})
             for i in range(3)]
    return CostTable(units, fwd_base=[4000 + 12 * p] * 3, bwd_base=[5000 + 12 * p] * 3,
                     tail_peak=100 + 30 * p, step_peak=6000, step_time=0.01 * p,
                     fixed=dict(FIXED, batch=12 * p))


UNITS = ['backbone.stem'] + [f'backbone.layer{i}.{j}' for i in range(1, 5) for j in range(2)]


SAVED = dict(budget_bytes=50 * 10 ** 6, predicted_peak_bytes=1000, measured_peak_bytes=1000,
             plan={**dict.fromkeys(UNITS), 'backbone.layer1.0': 'full'}, segments=[],
             fp16=False, cumulative_iters=2,
             samples_per_gpu=2, configured=dict(fp16=False, cumulative_iters=1,
                                                samples_per_gpu=4))


def plan_midway(run, cfg, batch, units=()):
    """Probe ``run`` on ``batch`` (the probe table names ``units``), plan it at the budget
    midway between its predicted peaks of every unit ``'full'`` and of plain, and check the
    planner's promise: the measured peak within the budget, the prediction within 5 % of it,
    the plan in force. Returns ``(table, result, budget)``."""
    from ckptzoo.apis.plan import ProbeSession, plan_memory
    from ckptzoo.memory import predict_peak, uniform_plan
    from ckptzoo.utils.model_wrapper import unwrap_model
    with ProbeSession(run) as session:
        table = session.cost_table(batch)
    assert set(units) <= set(table.names), sorted(set(units) - set(table.names))
    low = predict_peak(table, uniform_plan(table, 'full'))
    high = predict_peak(table, uniform_plan(table, None))
    assert low < high
    budget = (low + high) // 2
    result, _ = plan_memory(run, cfg, budget)
    assert result.measured_peak_bytes <= budget
    assert abs(result.predicted_peak_bytes - result.measured_peak_bytes) \
        <= 0.05 * result.measured_peak_bytes
    assert dict(unwrap_model(run.runner.model).checkpoint_plan()) == result.plan
    return table, result, budget
