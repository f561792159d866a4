"""Batch-shape buckets: the bounds chosen from the loader's shapes, the bucket a batch trains
with, and a plan per bucket from the cost model."""
import random

import pytest

from ckptzoo.memory import (Bucket, InfeasibleBudget, ShapeCostModel, bucket_for,
                            choose_buckets, plan_from_modes, predict_time, solve_buckets)
from ckptzoo.memory.model.buckets import _make_monotone

from tests.helpers.plans import table_at


def test_bucket_json_round_trip():
    b = Bucket((800, 1333), {'u0': 'full', 'u1': None}, [['u1', 'u2']], 123, 0.5)
    data = b.to_dict()
    assert data['shape'] == [800, 1333]
    assert Bucket.from_dict(data) == b and Bucket.from_dict(data).shape == (800, 1333)
    with pytest.raises(ValueError, match=r'positive ints, got \(800, -1\)'):
        Bucket((800, -1), {})


def test_bucket_for_takes_the_fastest_that_dominates():
    big = Bucket((800, 1344), {}, [], 10, 3.0)
    wide = Bucket((512, 1344), {}, [], 8, 2.0)
    tall = Bucket((800, 880), {}, [], 8, 2.0)
    small = Bucket((512, 512), {}, [], 5, 1.0)
    buckets = [big, wide, tall, small]
    assert bucket_for(buckets, (500, 500)) is small
    assert bucket_for(buckets, (512, 800)) is wide  # ties on time: the fewer pixels
    assert bucket_for(buckets, (513, 800)) is tall
    assert bucket_for(buckets, (800, 1344)) is big
    assert bucket_for(buckets, (801, 100)) is None
    # a faster bucket with more pixels beats a slower one with fewer
    assert bucket_for([Bucket((600, 600), {}, [], 1, 5.0), Bucket((700, 700), {}, [], 1, 1.0)],
                      (600, 600)).shape == (700, 700)


def random_candidates(n, seed):
    rng = random.Random(seed)
    return [((rng.randrange(8, 42) * 32, rng.randrange(8, 42) * 32), rng.random())
            for _ in range(n)]


@pytest.mark.parametrize('seed,max_buckets', [(0, 8), (1, 3), (2, 1), (3, 20)])
def test_chosen_bounds_dominate_every_candidate(seed, max_buckets):
    candidates = random_candidates(500, seed)
    bounds = choose_buckets(candidates, max_buckets)
    top = (max(s[0] for s, _ in candidates), max(s[1] for s, _ in candidates))
    assert top in bounds and len(bounds) <= max_buckets and len(set(bounds)) == len(bounds)
    for shape, _ in candidates:
        assert any(shape[0] <= h and shape[1] <= w for h, w in bounds), shape
    shuffled = list(candidates)
    random.Random(seed).shuffle(shuffled)
    assert choose_buckets(shuffled, max_buckets) == bounds


def test_the_merges_add_the_least_padding():
    """Two frequent shapes close together and a rare large one: the close ones share a
    bucket; the maximum of all is a bucket even when no batch has it."""
    candidates = [((96, 96), 10), ((104, 96), 10), ((400, 400), 1)]
    assert choose_buckets(candidates, 2) == [(104, 96), (400, 400)]
    assert choose_buckets(candidates, 3) == [(96, 96), (104, 96), (400, 400)]
    assert choose_buckets([((100, 50), 1), ((50, 100), 1)], 2) == [(100, 50), (100, 100)]
    assert choose_buckets([((100, 50), 1), ((50, 100), 1)], 3) == \
        [(50, 100), (100, 50), (100, 100)]


@pytest.mark.parametrize('candidates,max_buckets,message', [
    ([], 8, 'at least one candidate'),
    ([((64, 64), 1)], 0, 'max_buckets must be a positive int, got 0'),
    ([((64, 0), 1)], 8, r'positive ints, got \(64, 0\)'),
    ([((64, 64), -1)], 8, 'the weight of candidate 64x64 must be a finite number >= 0'),
    ([(64, 64)], 8, r'a candidate is \(\(H, W\), weight\), got \(64, 64\)'),
])
def test_bad_candidates_are_refused(candidates, max_buckets, message):
    with pytest.raises(ValueError, match=message):
        choose_buckets(candidates, max_buckets)


def shape_model():
    """Activations grow with the pixels; probed at 8x8 and 32x32."""
    return ShapeCostModel({(8, 8): table_at(64), (32, 32): table_at(1024)})


def test_a_smaller_bucket_gets_a_faster_plan():
    model = shape_model()
    plain_big = predict_time(model.table_at((32, 32)),
                             plan_from_modes(model.table_at((32, 32)), {}))
    budget = 45000  # the plain plan fits 16x16 (16 kB) but not 32x32 (55 kB; all full 37 kB)
    buckets = solve_buckets(model, [(16, 16), (32, 32), (8, 8), (16, 16)], budget)
    assert [b.shape for b in buckets] == [(32, 32), (16, 16), (8, 8)]
    big, mid, small = buckets
    assert all(b.predicted_peak_bytes <= budget for b in buckets)
    assert any(m is not None for m in big.plan.values())  # checkpoints something
    assert big.predicted_step_time > plain_big
    assert set(mid.plan.values()) == {None} == set(small.plan.values())
    for a in buckets:  # monotone: no bucket trains slower than a bucket above it would
        for b in buckets:
            if a.dominates(b.shape):
                table = model.table_at(b.shape)
                assert b.predicted_step_time <= predict_time(
                    table, plan_from_modes(table, a.plan, a.segments)) + 1e-12


def test_a_bucket_slower_than_the_plan_above_it_takes_that_plan():
    model = shape_model()
    table = model.table_at((16, 16))
    plain = plan_from_modes(table, {})
    big = Bucket((32, 32), {'u0': None, 'u1': None, 'u2': None}, [], 1, 1.0)
    slow = Bucket((16, 16), {'u0': 'full', 'u1': 'full', 'u2': 'full'}, [], 1,
                  predict_time(table, plan_from_modes(table, {'u0': 'full', 'u1': 'full',
                                                              'u2': 'full'})))
    _make_monotone(model, [big, slow], budget=10 ** 9)
    assert set(slow.plan.values()) == {None}
    assert slow.predicted_step_time == pytest.approx(predict_time(table, plain))


def test_the_largest_bucket_that_nothing_fits_is_named():
    with pytest.raises(InfeasibleBudget) as info:
        solve_buckets(shape_model(), [(8, 8), (32, 32)], 5000)
    exc = info.value
    assert exc.shape == (32, 32)
    assert str(exc).startswith('no checkpoint plan fits memory_budget=5000 B (4.9 KiB) for '
                               f'batches of shape 32x32: the smallest predicted peak is '
                               f'{exc.minimum.peak} B')
    assert 'set memory_budget to at least that' in str(exc)
    with pytest.raises(ValueError, match='larger than the largest probed shape 32x32'):
        solve_buckets(shape_model(), [(64, 64)], 10 ** 9)
