"""A checkpoint plan per batch-shape bucket.

A *bucket* is a bound ``(H, W)``: a batch of padded shape ``(h, w)`` fits it when ``h <= H`` and
``w <= W``. Memory grows with the pixels, so a plan whose predicted peak at the bound fits the
budget fits every batch the bucket dominates, and a batch of small images need not pay the
recompute that the largest batch needs. :func:`choose_buckets` picks the bounds from the
loader's batch shapes, :func:`solve_buckets` a plan per bound, and :func:`bucket_for` the
bucket a batch trains with.
"""
from __future__ import annotations

import numbers
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .peak import plan_from_modes, plan_modes, plan_segments, predict_peak, predict_time
from .shape_model import ShapeCostModel, _check_shape, shape_key
from .solver import InfeasibleBudget, choose_plan

__all__ = ['Bucket', 'bucket_for', 'choose_buckets', 'solve_buckets']

Shape = tuple[int, int]
#: more distinct candidate shapes than this are rounded up to a coarser grid first
MAX_CANDIDATES = 512


@dataclass
class Bucket:
    """A bound ``shape`` ``(H, W)`` and the plan its batches train with: ``plan`` (``{unit
    name: mode}``), ``segments`` (``[[first unit, last unit]]``), the predicted peak (bytes)
    and step time (seconds) at the bound, and the peak measured there, when it was."""

    shape: Shape
    plan: dict[str, str | None]
    segments: list[list[str]] = field(default_factory=list)
    predicted_peak_bytes: int = 0
    predicted_step_time: float | None = None
    measured_peak_bytes: int | None = None

    def __post_init__(self):
        self.shape = _check_shape(tuple(self.shape) if isinstance(self.shape, list)
                                  else self.shape)

    @property
    def pixels(self) -> int:
        """``H * W`` of the bound."""
        return self.shape[0] * self.shape[1]

    def dominates(self, shape: Shape) -> bool:
        """Whether a batch of padded ``shape`` fits this bucket."""
        return shape[0] <= self.shape[0] and shape[1] <= self.shape[1]

    def to_dict(self) -> dict[str, Any]:
        """As JSON data (the shape as ``[H, W]``)."""
        return dict(shape=list(self.shape), plan=dict(self.plan),
                    segments=[list(s) for s in self.segments],
                    predicted_peak_bytes=self.predicted_peak_bytes,
                    predicted_step_time=self.predicted_step_time,
                    measured_peak_bytes=self.measured_peak_bytes)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Bucket:
        """From :meth:`to_dict`'s data."""
        return cls(tuple(d['shape']), dict(d['plan']), [list(s) for s in d.get('segments', [])],
                   d.get('predicted_peak_bytes', 0), d.get('predicted_step_time'),
                   d.get('measured_peak_bytes'))


def bucket_for(buckets: Iterable[Bucket], shape: Shape) -> Bucket | None:
    """The fastest bucket (smallest predicted step time, unknown last; ties: the fewest
    pixels) whose bound dominates ``shape``, or None when none does."""
    fits = [b for b in buckets if b.dominates(shape)]
    if not fits:
        return None
    return min(fits, key=lambda b: (b.predicted_step_time is None, b.predicted_step_time or 0.0,
                                    b.pixels, b.shape))


def _candidates(candidates):
    """``{shape: total weight}`` of ``[((H, W), weight)]``, checked."""
    out: dict[Shape, float] = {}
    for item in candidates:
        if not (isinstance(item, (tuple, list)) and len(item) == 2 and
                isinstance(item[0], (tuple, list))):
            raise ValueError(f'a candidate is ((H, W), weight), got {item!r}')
        shape, weight = item
        shape = _check_shape(tuple(shape) if isinstance(shape, list) else shape)
        if isinstance(weight, bool) or not isinstance(weight, numbers.Real) or \
                not weight >= 0 or weight == float('inf'):
            raise ValueError(f'the weight of candidate {shape_key(shape)} must be a finite '
                             f'number >= 0, got {weight!r}')
        out[shape] = out.get(shape, 0.0) + float(weight)
    if not out:
        raise ValueError('choose_buckets needs at least one candidate batch shape')
    return out


def _coarsen(weights, top):
    """``weights`` with every shape rounded up to a grid (capped at ``top``, which still
    dominates it), coarser until at most :data:`MAX_CANDIDATES` shapes remain."""
    step = 8
    while len(weights) > MAX_CANDIDATES:
        coarse: dict[Shape, float] = {}
        for (h, w), weight in weights.items():
            s = (min(top[0], -(-h // step) * step), min(top[1], -(-w // step) * step))
            coarse[s] = coarse.get(s, 0.0) + weight
        weights, step = coarse, step * 2
    return weights


def choose_buckets(candidates: Sequence[tuple[Shape, float]], max_buckets: int = 8,
                   required: Sequence[Shape] | None = None) -> list[Shape]:
    """At most ``max_buckets`` bounds that together dominate every candidate batch shape
    (``[((H, W), weight)]``, weight: how often the loader gives that shape), with little
    expected padding: every distinct shape starts as a bucket, with the ``required`` bounds
    (each sampler group's worst shape: no batch mixes groups, so their componentwise maximum
    is no batch's) or, without them, the componentwise maximum of all candidates (so that
    every batch has a bucket), and the pair whose merge (the
    componentwise maximum of their bounds) adds the least ``weight * extra pixels`` is merged
    until at most ``max_buckets`` remain. Deterministic; the bounds sorted by pixels, the
    maximum last. More than :data:`MAX_CANDIDATES` distinct shapes are first rounded up to a
    coarser grid."""
    if isinstance(max_buckets, bool) or not isinstance(max_buckets, int) or max_buckets < 1:
        raise ValueError(f'max_buckets must be a positive int, got {max_buckets!r}')
    weights = _candidates(candidates)
    top = (max(s[0] for s in weights), max(s[1] for s in weights))
    for shape in required or ():
        shape = _check_shape(tuple(shape))
        top = (max(top[0], shape[0]), max(top[1], shape[1]))
    weights = _coarsen(weights, top)
    for shape in required or [top]:
        weights.setdefault(tuple(shape), 0.0)
    shapes = sorted(weights, key=lambda s: (s[0] * s[1], s))
    h = np.array([s[0] for s in shapes], dtype=np.float64)
    w = np.array([s[1] for s in shapes], dtype=np.float64)
    mass = np.array([weights[s] for s in shapes], dtype=np.float64)
    n = len(shapes)
    alive = np.ones(n, dtype=bool)

    def costs(i):  # the cost of merging bucket i with each other one
        mh, mw = np.maximum(h, h[i]), np.maximum(w, w[i])
        merged = mh * mw
        c = mass[i] * (merged - h[i] * w[i]) + mass * (merged - h * w)
        c[~alive] = np.inf
        c[i] = np.inf
        return c

    cost = np.full((n, n), np.inf)
    for i in range(n):
        cost[i] = costs(i)
    count = n
    while count > max_buckets:
        flat = int(np.argmin(cost))
        i, j = divmod(flat, n)
        i, j = min(i, j), max(i, j)
        # the merged bound replaces j (the later one: the maximum, last, is never removed)
        h[j], w[j] = max(h[i], h[j]), max(w[i], w[j])
        mass[j] += mass[i]
        alive[i] = False
        cost[i, :] = np.inf
        cost[:, i] = np.inf
        row = costs(j)
        cost[j, :] = row
        cost[:, j] = row
        count -= 1
    bounds = {(int(h[k]), int(w[k])) for k in range(n) if alive[k]}
    return sorted(bounds, key=lambda s: (s[0] * s[1], s))


def _fits(model, shape, plan, segments, budget):
    """``(peak, time)`` of ``plan`` at ``shape``, or None when it does not fit ``budget``."""
    table = model.table_at(shape)
    groups = plan_from_modes(table, plan, segments)
    peak = predict_peak(table, groups)
    return (peak, predict_time(table, groups)) if peak <= budget else None


def solve_buckets(model: ShapeCostModel, shapes: Iterable[Shape], budget: int,
                  segments: bool = True) -> list[Bucket]:
    """A :class:`Bucket` per bound in ``shapes``, the largest (by pixels) first: the solver's
    plan (:func:`~ckptzoo.memory.model.solver.choose_plan`) on the cost model's table at the bound.

    The largest bound must fit: otherwise :class:`InfeasibleBudget` names its shape and the
    smallest budget that fits it. A smaller bound that nothing fits (memory that does not grow
    with the pixels) takes the plan of the smallest fitting bucket that dominates it. The
    plans are monotone: a bucket never trains slower than the plan of a bucket dominating it
    would make it (where that plan fits it, it takes that plan)."""
    order = sorted({_check_shape(tuple(s)) for s in shapes}, key=lambda s: (-s[0] * s[1], s))
    if not order:
        raise ValueError('solve_buckets needs at least one bucket shape')
    buckets: list[Bucket] = []
    for shape in order:
        table = model.table_at(shape)
        try:
            sol = choose_plan(table, budget, segments)
        except InfeasibleBudget as exc:
            above = sorted((b for b in buckets if b.dominates(shape)), key=lambda b: b.pixels)
            taken = next(((b, fit) for b in above
                          if (fit := _fits(model, shape, b.plan, b.segments, budget))), None)
            if taken is None:
                raise InfeasibleBudget(budget, exc.minimum, shape=shape) from exc
            b, (peak, seconds) = taken
            buckets.append(Bucket(shape, dict(b.plan), [list(s) for s in b.segments], peak,
                                  seconds))
            continue
        buckets.append(Bucket(shape, plan_modes(table, sol.plan),
                              plan_segments(table, sol.plan), sol.peak, sol.time))
    _make_monotone(model, buckets, budget)
    return buckets


def _make_monotone(model, buckets, budget):
    """Give a bucket the plan of a bucket dominating it where that plan fits it and is faster
    there (the solver's discretisation can miss it); the largest first, so it propagates."""
    for big in buckets:
        for small in buckets:
            if small is big or not big.dominates(small.shape):
                continue
            fit = _fits(model, small.shape, big.plan, big.segments, budget)
            if fit is not None and fit[1] < (small.predicted_step_time or 0.0) - 1e-9:
                small.plan = dict(big.plan)
                small.segments = [list(s) for s in big.segments]
                small.predicted_peak_bytes, small.predicted_step_time = fit
