"""The cost of a plan at any batch shape, from cost tables probed at a few.

Every entry of a :class:`CostTable` is taken as a function of the batch's pixels ``p = H * W``,
linear between the probed shapes: the activations of a convolution, the anchors of a dense head
and, at a fixed number of ground-truth boxes per image, the anchor-box IoU matrix all grow with
``H * W``, and so do the times of the ops that make them. The error is the stride rounding of
the deeper levels (a level of stride ``s`` is ``ceil(H / s) x ceil(W / s)``), which is bounded
by the padding to the loader's ``size_divisor``. Entries that do not depend on the shape
(parameters, gradients, optimizer state) are equal in every table and so come out unchanged.

One probed table says nothing about how memory grows: the activations are not all
proportional to the pixels (the bases hold the weights), so a single table is used as it is
for shapes of at most its pixels and larger ones are refused. With several tables the entries
are piecewise linear through them; below the smallest the first piece is extended (clamped
at zero), beyond the largest nothing is extrapolated.

A mode probed at some shapes only (``'selective'`` probed at the largest, the smaller probe a
single plain step, which keeps the probe cheap) is scaled from the plain mode of the same unit:
``value_mode(s) = value_mode(s_probed) * value_plain(s) / value_plain(s_probed)`` (0 where the
plain value at ``s_probed`` is 0), ``s_probed`` the probed shape nearest in pixels that has the
mode (the larger one on a tie). Bytes are compared with the plain bytes of the same entry
(``kept``, ``fwd_peak``, ``bwd_peak``), recompute times with the plain forward time.
"""
from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from .cost_table import CostTable, UnitCost

__all__ = ['ShapeCostModel', 'shape_key', 'parse_shape_key']

Shape = tuple[int, int]


def shape_key(shape: Shape) -> str:
    """``'HxW'``: a shape as a JSON object key."""
    return f'{shape[0]}x{shape[1]}'


def parse_shape_key(key: str) -> Shape:
    """The shape :func:`shape_key` wrote, or a ValueError naming ``key``."""
    parts = key.split('x') if isinstance(key, str) else []
    if len(parts) != 2 or not all(p.isdigit() and int(p) > 0 for p in parts):
        raise ValueError(f'a batch shape key must be "HxW" with positive ints, got {key!r}')
    return int(parts[0]), int(parts[1])


def _check_shape(shape: Any) -> Shape:
    if not (isinstance(shape, (tuple, list)) and len(shape) == 2 and
            all(isinstance(s, int) and not isinstance(s, bool) and s > 0 for s in shape)):
        raise ValueError(f'a batch shape must be (H, W) with positive ints, got {shape!r}')
    return int(shape[0]), int(shape[1])


def _structure(table: CostTable) -> dict[str, Any]:
    return dict(names=table.names, chains=[tuple(c) for c in table.chains],
                exits=list(table.exits), bwd_order=list(table.bwd_order))


def _ratio(value_mode, plain_there, plain_here):
    """``value_mode`` scaled as the plain value went from ``plain_there`` to ``plain_here``."""
    return value_mode * plain_here / plain_there if plain_there else 0


def _fill_modes(tables: list[tuple[int, CostTable]]) -> list[CostTable]:
    """Copies of ``tables`` (``(pixels, table)`` sorted by pixels) where every unit has every
    mode it has in any of them: a missing mode is scaled from the nearest probed one by the
    plain values (see the module's docstring)."""
    out = [copy.deepcopy(t) for _, t in tables]
    pixels = [p for p, _ in tables]
    for i in range(len(out[0].units)):
        units = [t.units[i] for t in out]
        for attr, plain_of in (('kept', lambda u, a: getattr(u, a)[None]),
                               ('fwd_peak', lambda u, a: getattr(u, a)[None]),
                               ('bwd_peak', lambda u, a: getattr(u, a)[None]),
                               ('recompute_time', lambda u, a: u.fwd_time)):
            modes = {m for u in units for m in getattr(u, attr)}
            for mode in modes:
                having = [k for k, u in enumerate(units) if mode in getattr(u, attr)]
                for k, u in enumerate(units):
                    if mode in getattr(u, attr):
                        continue
                    src = min(having, key=lambda j: (abs(pixels[j] - pixels[k]), -pixels[j]))
                    value = _ratio(getattr(units[src], attr)[mode], plain_of(units[src], attr),
                                   plain_of(u, attr))
                    getattr(u, attr)[mode] = value if attr == 'recompute_time' else \
                        int(round(value))
    return out


class ShapeCostModel:
    """Cost tables of one model, batch size and box count probed at one or more batch shapes
    ``{(H, W): CostTable}``; :meth:`table_at` is the table at any shape they cover (see the
    module's docstring for how)."""

    def __init__(self, tables: Mapping[Shape, CostTable]):
        if not tables:
            raise ValueError('a ShapeCostModel needs at least one probed cost table')
        items = sorted(((_check_shape(s), t) for s, t in tables.items()),
                       key=lambda st: (st[0][0] * st[0][1], st[0]))
        for (a, _), (b, _) in zip(items, items[1:]):
            if a[0] * a[1] == b[0] * b[1]:
                raise ValueError(f'probed shapes {shape_key(a)} and {shape_key(b)} have the '
                                 f'same pixel count ({a[0] * a[1]}): costs are a function of '
                                 'the pixels, probe shapes of different sizes')
        first_shape, first = items[0]
        for shape, table in items[1:]:
            want, got = _structure(first), _structure(table)
            for key in want:
                if want[key] != got[key]:
                    raise ValueError(
                        f'the cost tables probed at {shape_key(first_shape)} and '
                        f'{shape_key(shape)} differ in their units\' {key} ({want[key]} vs '
                        f'{got[key]}): they are not of the same model')
        self.tables: dict[Shape, CostTable] = {s: t for s, t in items}
        self._pixels = [s[0] * s[1] for s, _ in items]
        self._filled = _fill_modes([(p, t) for p, (_, t) in zip(self._pixels, items)])

    @property
    def shapes(self) -> list[Shape]:
        """The probed shapes, by pixels."""
        return list(self.tables)

    @property
    def largest(self) -> Shape:
        """The probed shape with the most pixels: nothing beyond it is predicted."""
        return self.shapes[-1]

    def table_at(self, shape: Shape) -> CostTable:
        """The cost table at batch shape ``(H, W)``: piecewise linear in ``H * W`` through the
        probed tables (one table: itself, for shapes of at most its pixels). A ValueError
        names the shape and the largest probed one when ``shape`` is beyond it."""
        shape = _check_shape(shape)
        p = shape[0] * shape[1]
        largest = self.largest
        if p > self._pixels[-1]:
            raise ValueError(
                f'batch shape {shape_key(shape)} ({p} pixels) is larger than the largest '
                f'probed shape {shape_key(largest)} ({self._pixels[-1]} pixels): costs are not '
                'extrapolated, probe at a shape at least as large')
        if p in self._pixels:
            return copy.deepcopy(self._filled[self._pixels.index(p)])
        if len(self._filled) == 1:
            return copy.deepcopy(self._filled[0])
        k = next((k for k in range(1, len(self._pixels)) if p < self._pixels[k]), 1)
        p0, p1 = self._pixels[k - 1], self._pixels[k]
        return _interpolate(self._filled[k - 1], self._filled[k], (p - p0) / (p1 - p0))

    def to_dict(self) -> dict[str, Any]:
        """As JSON data: ``{'tables': {'HxW': CostTable.to_dict()}}``."""
        return dict(tables={shape_key(s): t.to_dict() for s, t in self.tables.items()})

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ShapeCostModel:
        """From :meth:`to_dict`'s data (a ValueError says what is wrong)."""
        if not isinstance(d, Mapping) or not isinstance(d.get('tables'), Mapping):
            raise ValueError(f'a shape cost model is {{"tables": {{"HxW": cost table}}}}, got '
                             f'{type(d).__name__}')
        tables = {}
        for key, table in d['tables'].items():
            shape = parse_shape_key(key)
            try:
                tables[shape] = CostTable.from_dict(table)
            except (KeyError, TypeError, AttributeError) as exc:
                raise ValueError(f'the cost table of {key} is not a cost table ({exc!r})') \
                    from exc
        return cls(tables)


def _line(a, b, t, kind=int):
    """``a`` to ``b`` at ``t`` (``a`` exactly where they are equal), clamped at 0."""
    value = max(0.0, a + (b - a) * t)
    return int(round(value)) if kind is int else value


def _by_mode(a: dict, b: dict, t, kind=int) -> dict:
    return {m: _line(a[m], b[m], t, kind) for m in a}


def _interpolate(a: CostTable, b: CostTable, t: float) -> CostTable:
    """The table ``t`` of the way from ``a`` to ``b`` (``t`` < 0 extends the line below)."""
    units = [UnitCost(ua.name, _by_mode(ua.kept, ub.kept, t),
                      _by_mode(ua.fwd_peak, ub.fwd_peak, t),
                      _by_mode(ua.bwd_peak, ub.bwd_peak, t),
                      _line(ua.fwd_time, ub.fwd_time, t, float),
                      _by_mode(ua.recompute_time, ub.recompute_time, t, float))
             for ua, ub in zip(a.units, b.units)]
    fixed = {k: _line(a.fixed.get(k, 0), b.fixed.get(k, 0), t)
             for k in list(a.fixed) + [k for k in b.fixed if k not in a.fixed]}
    return CostTable(units, [_line(x, y, t) for x, y in zip(a.fwd_base, b.fwd_base)],
                     [_line(x, y, t) for x, y in zip(a.bwd_base, b.bwd_base)],
                     _line(a.tail_peak, b.tail_peak, t), _line(a.step_peak, b.step_peak, t),
                     _line(a.step_time, b.step_time, t, float), list(a.bwd_order),
                     [tuple(c) for c in a.chains], fixed, list(a.exits),
                     max(a.window, b.window))
