"""The peak model on hand-computed chains, and the solver against brute force."""
import itertools
import random

import pytest

from ckptzoo.memory import (CostTable, Group, InfeasibleBudget, UnitCost, chen_sqrt_plan,
                            count_plans, kept_bytes, minimum_peak, most_frugal, peak_points,
                            plan_from_modes, plan_modes, plan_segments, predict_peak,
                            predict_time, solve, uniform_plan)
from ckptzoo.memory.model.peak import check_plan
from ckptzoo.memory.model.solver import _groups_at

MODES = (None, 'full', 'selective', 'offload')


def hand_table():
    """Three units of a chain; numbers small enough to add up by hand."""
    units = [UnitCost(f'u{i}', kept={None: 100, 'full': 10, 'selective': 60},
                      fwd_peak={None: 120, 'full': 30, 'selective': 80},
                      bwd_peak={None: 50, 'full': 140, 'selective': 90}, fwd_time=1.0,
                      recompute_time={'selective': 0.25})
             for i in range(3)]
    return CostTable(units, fwd_base=[1000] * 3, bwd_base=[1000] * 3, tail_peak=1040,
                     step_peak=1200, step_time=10.0)


def test_resident_bytes_move_every_point_of_the_peak():
    """Memory the recorded steps did not see (DDP's buckets) raises every point alike."""
    table, moved = hand_table(), hand_table().add_resident('ddp_buckets', 77)
    for plan in (uniform_plan(table, None), uniform_plan(table, 'full')):
        assert [(name, b + 77) for name, b in peak_points(table, plan)] == \
            peak_points(moved, plan)
    assert moved.fixed == {'ddp_buckets': 77}
    assert CostTable.from_dict(moved.to_dict()).step_peak == 1277


def test_peak_model_by_hand():
    table = hand_table()
    plain = uniform_plan(table, None)
    points = dict(peak_points(table, plain))
    assert points['forward u2'] == 1000 + 200 + 120
    assert points['loss'] == 300 + 1040
    assert points['backward u2'] == 1000 + 200 + 100 + 50
    assert points['backward u0'] == 1000 + 0 + 100 + 50
    assert predict_peak(table, plain) == 1350 and predict_time(table, plain) == 10.0
    full = uniform_plan(table, 'full')
    assert dict(peak_points(table, full))['backward u2'] == 1000 + 20 + 10 + 140
    assert predict_peak(table, full) == 1200  # the optimizer step
    assert predict_time(table, full) == 13.0
    # one segment over all three: keeps only the last output, recomputes all three at once
    seg = (Group(0, 3, 'full'),)
    points = dict(peak_points(table, seg))
    assert points['loss'] == 10 + 1040
    # recomputed when its backward starts, while its kept output is still held
    assert points['recompute u2 (segment)'] == 1000 + 10 + 200 + 120
    assert points['backward u2 (segment)'] == 1000 + 300 + 50
    assert points['backward u0 (segment)'] == 1000 + 100 + 50
    assert predict_time(table, seg) == 13.0
    mixed = (Group(0, 1, 'selective'), Group(1, 3, 'full'))
    assert predict_time(table, mixed) == 12.25
    assert plan_modes(table, mixed) == {'u0': 'selective', 'u1': 'full', 'u2': 'full'}
    assert plan_segments(table, mixed) == [['u1', 'u2']]
    assert plan_from_modes(table, {'u0': 'selective'}, [('u1', 'u2')]) == mixed
    # u1's output also leaves the chain (a stage output): the segment returns and keeps it
    table.exits = [1]
    points = dict(peak_points(table, seg))
    assert points['loss'] == 10 + 10 + 1040
    assert points['forward u2'] == 1000 + 10 + 30
    assert points['recompute u2 (segment)'] == 1000 + 10 + 200 + 120  # u1's left long ago
    assert points['backward u1 (segment)'] == 1000 + 200 + 50


def test_bad_plans():
    table = hand_table()
    with pytest.raises(ValueError, match="no cost for mode 'offload'"):
        check_plan(table, uniform_plan(table, None)[:2] + (Group(2, 3, 'offload'),))
    with pytest.raises(ValueError, match='segment must be full'):
        check_plan(table, (Group(0, 3, 'selective'),))
    with pytest.raises(ValueError, match='covers 2 of 3'):
        check_plan(table, (Group(0, 2, 'full'),))
    with pytest.raises(KeyError, match=r"unknown checkpoint units \['u9'\]"):
        plan_from_modes(table, {'u9': 'full'})


def random_table(n, seed, chains=None, modes=MODES, exits=()):
    rng = random.Random(seed)
    units = []
    for i in range(n):
        plain = rng.randint(50, 400)
        out = rng.randint(5, plain // 3)
        kept = {None: plain, 'full': out, 'selective': rng.randint(out, plain),
                'offload': rng.randint(out, plain)}
        kept = {m: kept[m] for m in modes}
        units.append(UnitCost(
            f'u{i}', kept=kept,
            fwd_peak={m: kept[m] + rng.randint(0, 100) for m in kept},
            bwd_peak={m: rng.randint(20, 200) + (plain if m == 'full' else 0) for m in kept},
            fwd_time=rng.uniform(0.5, 2.0),
            recompute_time={'selective': rng.uniform(0.1, 0.6), 'offload': rng.uniform(0, 0.3)}))
    return CostTable(units, fwd_base=[rng.randint(900, 1100) for _ in range(n)],
                     bwd_base=[rng.randint(1000, 1300) for _ in range(n)],
                     tail_peak=rng.randint(0, 300), step_peak=rng.randint(1200, 1600),
                     step_time=20.0, chains=chains, exits=list(exits))


def brute_force(table, budget):
    """Every partition of each chain into segments, every mode of each single unit."""
    n = len(table.units)
    best = None
    cuts = [i for i in range(1, n)]
    for mask in itertools.product((0, 1), repeat=len(cuts)):
        bounds = [0] + [c for c, m in zip(cuts, mask) if m] + [n]
        spans = list(zip(bounds, bounds[1:]))
        if any(b - a > 1 and (table.chain_of(a) is None or b > table.chain_of(a)[1])
               for a, b in spans):
            continue
        choices = [[(a, b, 'full')] if b - a > 1 else
                   [(a, b, m) for m in table.units[a].modes] for a, b in spans]
        for groups in itertools.product(*choices):
            plan = tuple(Group(*g) for g in groups)
            peak = predict_peak(table, plan)
            if peak <= budget:
                key = (round(predict_time(table, plan), 6), peak)  # k singles == one segment
                if best is None or key < best[0]:
                    best = (key, plan)
    return best


@pytest.mark.parametrize('seed', range(3))
def test_solver_is_optimal_against_brute_force(seed):
    n = 6
    table = random_table(n, seed, chains=[(0, 4)] if seed % 2 else None, exits=(1, 3))
    low = minimum_peak(table).peak
    high = predict_peak(table, uniform_plan(table, None))
    assert low < high
    for budget in [low + (high - low) * k // 4 for k in range(5)]:
        ref = brute_force(table, budget)
        for limit in (10 ** 9, 0):  # exhaustive search, then the dynamic program
            got = solve(table, budget, exhaustive_limit=limit)
            assert got.peak <= budget
            assert got.time == pytest.approx(ref[0][0], abs=1e-5) and got.peak == ref[0][1]
    assert minimum_peak(table, exhaustive_limit=0).peak == low


def test_most_frugal_keeps_the_fewest_bytes_near_the_smallest_peak():
    table = random_table(6, 5, exits=(2, ))
    low = minimum_peak(table)
    bound = int(low.peak * 1.01)
    plans = [p for p in _all_plans(table) if predict_peak(table, p) <= bound]
    fewest = min(kept_bytes(table, p) for p in plans)
    for limit in (10 ** 9, 0):
        got = most_frugal(table, exhaustive_limit=limit)
        assert got.peak <= bound and kept_bytes(table, got.plan) == fewest
    assert fewest < kept_bytes(table, low.plan)  # not the same question as minimum_peak


def _all_plans(table, i=0):
    if i == len(table.units):
        yield ()
        return
    for g in _groups_at(table, i, None, True):
        for rest in _all_plans(table, g.stop):
            yield (g, ) + rest


def test_dynamic_program_on_a_long_chain_matches_exhaustive_search():
    table = random_table(7, 11, modes=(None, 'full', 'selective'))
    assert 3000 < count_plans(table) < 20000
    low = minimum_peak(table).peak
    high = predict_peak(table, uniform_plan(table, None))
    for budget in (low, (low + high) // 2, high):
        a = solve(table, budget)
        b = solve(table, budget, exhaustive_limit=0)
        assert a.method == 'exhaustive' and b.method == 'dynamic program'
        assert a.time == pytest.approx(b.time, abs=1e-5) and a.peak == b.peak


def test_peak_never_rises_as_the_budget_falls():
    table = random_table(30, 3, chains=[(0, 20)])
    low = minimum_peak(table).peak
    high = predict_peak(table, uniform_plan(table, None))
    peaks, times = [], []
    for k in range(12):
        sol = solve(table, high - (high - low) * k // 11)
        assert sol.method == 'dynamic program' and sol.peak <= high - (high - low) * k // 11
        peaks.append(sol.peak)
        times.append(sol.time)
    assert peaks == sorted(peaks, reverse=True)
    assert times == sorted(times)
    assert peaks[-1] == low
    assert solve(table, high).plan == uniform_plan(table, None)  # plain fits: no recompute


def test_segments_go_below_per_unit_checkpointing():
    table = random_table(12, 5, modes=(None, 'full'))
    per_unit = minimum_peak(table, segments=False).peak
    with_segments = minimum_peak(table).peak
    assert with_segments < per_unit
    chen = chen_sqrt_plan(table)
    assert [g.stop - g.start for g in chen] == [4, 4, 4]
    assert predict_peak(table, chen) >= with_segments


def test_infeasible_budget_reports_the_minimum_and_its_plan():
    table = random_table(6, 2)
    low = minimum_peak(table)
    with pytest.raises(InfeasibleBudget) as info:
        solve(table, low.peak - 1)
    err = info.value
    assert err.minimum.peak == low.peak and err.minimum.plan == low.plan
    assert err.budget == low.peak - 1
    assert f'smallest predicted peak is {low.peak} B' in str(err)
    assert solve(table, low.peak).peak == low.peak


def test_segments_only_where_no_per_unit_plan_fits():
    """choose_plan keeps to one checkpoint per unit down to the per-unit floor, takes segments
    below it, and the chosen peak never rises as the budget falls across the switch."""
    from ckptzoo.memory.model.solver import choose_plan
    table = random_table(12, 5, modes=(None, 'full', 'selective'))
    floor = minimum_peak(table, segments=False).peak
    lowest = minimum_peak(table).peak
    high = predict_peak(table, uniform_plan(table, None))
    assert lowest < floor
    budgets = sorted({floor, floor - 1, lowest, (lowest + floor) // 2,
                      *range(floor, high + 1, max(1, (high - floor) // 8))}, reverse=True)
    peaks = []
    for budget in budgets:
        plan = choose_plan(table, budget).plan
        assert bool(plan_segments(table, plan)) == (budget < floor), budget
        if budget >= floor:  # the fastest per-unit plan
            assert plan == solve(table, budget, segments=False).plan
        peaks.append(predict_peak(table, plan))
    assert peaks == sorted(peaks, reverse=True)
    with pytest.raises(InfeasibleBudget) as info:
        choose_plan(table, lowest - 1)
    assert info.value.minimum.peak == lowest  # the smallest with segments
