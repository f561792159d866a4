"""The plan a run trains with, as data and as ``work_dir/memory_plan.json``.

:class:`PlanResult` is what the planner decided (the modes, the segments, the options beyond
checkpointing) and what it measured; it is plain data, written to the work dir and read back
when the run resumes. A file that is not such a plan (corrupt, truncated, another program's
JSON) is refused with its path and how to plan again, instead of a bare ``JSONDecodeError`` /
``KeyError``. A plan made for another budget or batch is not reused silently:
:func:`plan_changes` says what changed, and the planner plans again; nor is one made for
another model or other data (``made_for``, :mod:`~ckptzoo.memory.plan_fit`).

A plan per batch-shape bucket (:mod:`~ckptzoo.memory.model.buckets`) keeps the largest bucket's
plan at the top level (``plan``, ``segments``), so that a reader that knows no buckets trains
every batch safely; a file without ``buckets`` is one bucket, the worst-case shape's.
"""
import json
import numbers
from dataclasses import dataclass, field
from typing import Any

from .model.buckets import Bucket
from .model.budget import format_budget
from .model.cost_table import MODES, CostTable
from .plan_fit import made_for_problem
from .model.shape_model import ShapeCostModel

__all__ = ['PLAN_FILE', 'PlanResult', 'PlanFileError', 'read_plan_file', 'write_plan_file',
           'plan_changes', 'REQUIRED']

#: the plan is saved under this name in the work dir, and a resume reuses it
PLAN_FILE = 'memory_plan.json'
#: the keys every plan file has, and their types
REQUIRED = dict(budget_bytes=int, predicted_peak_bytes=int, measured_peak_bytes=int, plan=dict,
                segments=list, fp16=bool, cumulative_iters=int, samples_per_gpu=int)
_OPTIONS = ('samples_per_gpu', 'cumulative_iters', 'fp16')


@dataclass
class PlanResult:
    """A plan and what it was measured to need: the budget and the predicted and measured peak
    (bytes), ``plan`` (``{unit name: mode}``, as ``model.set_checkpoint_plan`` takes it),
    ``segments`` (``[[first unit, last unit]]``), the options it trains with (``fp16``,
    ``cumulative_iters``, ``samples_per_gpu``), the step times, the margin and re-plans the
    validation needed, the probe's cost ``table`` (not saved) and the options as ``configured``
    before the outer search changed them (None when it did not run). Planned per batch shape:
    ``buckets`` (the largest, whose plan ``plan`` and ``segments`` are, first), the ground-truth
    boxes per image the probe batches had, ``shapes_note`` (how the batch shapes were found,
    e.g. why the pipeline's bound stood in for the data) and ``cost_model``
    (:meth:`ShapeCostModel.to_dict`, so that a resumed run can plan a bucket again without
    probing). ``made_for``: the model and data it was made for
    (:func:`~ckptzoo.memory.plan_fit.made_for`), so that a resume reuses it only for them."""

    budget_bytes: int
    predicted_peak_bytes: int
    measured_peak_bytes: int
    plan: dict[str, str | None]
    segments: list[list[str]]
    fp16: bool
    cumulative_iters: int
    samples_per_gpu: int
    predicted_step_time: float | None = None
    measured_step_time: float | None = None
    margin: float = 0.0
    replans: int = 0
    table: CostTable | None = field(default=None, repr=False)
    configured: dict[str, Any] | None = None
    buckets: list[Bucket] | None = None
    boxes_per_image: int | None = None
    shapes_note: str | None = None
    cost_model: dict[str, Any] | None = field(default=None, repr=False)
    made_for: dict[str, Any] | None = field(default=None, repr=False)

    @property
    def options(self) -> dict[str, Any]:
        """``{'fp16', 'cumulative_iters', 'samples_per_gpu'}`` this plan trains with."""
        return dict(fp16=self.fp16, cumulative_iters=self.cumulative_iters,
                    samples_per_gpu=self.samples_per_gpu)

    def to_dict(self) -> dict[str, Any]:
        """The plan file's content (everything but the cost table)."""
        keys = ('budget_bytes', 'predicted_peak_bytes', 'measured_peak_bytes', 'plan',
                'segments', 'fp16', 'cumulative_iters', 'samples_per_gpu',
                'predicted_step_time', 'measured_step_time', 'margin', 'replans')
        out = {k: getattr(self, k) for k in keys}
        if self.configured is not None:
            out['configured'] = dict(self.configured)
        out['plan'] = dict(self.plan)
        if self.buckets is not None:
            out['buckets'] = [b.to_dict() for b in self.buckets]
        for key in ('boxes_per_image', 'shapes_note', 'cost_model', 'made_for'):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        return out

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> 'PlanResult':
        """The plan of a plan file's content (checked by :func:`read_plan_file`)."""
        kwargs = {k: d[k] for k in cls.__dataclass_fields__ if k in d and k != 'table'}
        if kwargs.get('buckets') is not None:
            kwargs['buckets'] = [b if isinstance(b, Bucket) else Bucket.from_dict(b)
                                 for b in kwargs['buckets']]
        return cls(**kwargs)


class PlanFileError(ValueError):
    """A ``memory_plan.json`` that cannot be read as a plan."""


def _problem(data: Any) -> str | None:
    """Why ``data`` (parsed JSON) is not a plan, or None."""
    if not isinstance(data, dict):
        return f'a JSON {type(data).__name__}, not an object'
    missing = [k for k in REQUIRED if k not in data]
    if missing:
        return f'no {", ".join(missing)}'
    for key, kind in REQUIRED.items():
        value = data[key]
        if kind is int and (isinstance(value, bool) or not isinstance(value, numbers.Integral)
                            or value < (1 if key in ('cumulative_iters', 'samples_per_gpu')
                                        else 0)):
            return f'{key} must be a {"positive" if key in _OPTIONS else "non-negative"} ' \
                   f'int, got {value!r}'
        if kind is not int and not isinstance(value, kind):
            return f'{key} must be a {kind.__name__}, got {value!r}'
    problem = _plan_problem(data['plan'], data['segments'], '')
    if problem:
        return problem
    configured = data.get('configured')
    if configured is not None and (not isinstance(configured, dict)
                                   or set(configured) != set(_OPTIONS)):
        return f'configured must hold {", ".join(_OPTIONS)}, got {configured!r}'
    if data.get('made_for') is not None:
        problem = made_for_problem(data['made_for'])
        if problem:
            return problem
    return _buckets_problem(data)


def _is_int(value, least=0):
    return isinstance(value, numbers.Integral) and not isinstance(value, bool) and value >= least


def _plan_problem(plan, segments, where):
    """Why ``plan`` / ``segments`` are not a plan's, or None."""
    if not isinstance(plan, dict):
        return f'{where}plan must be a dict, got {plan!r}'
    modes = [m for m in plan.values() if m not in MODES]
    if modes:
        return f'unknown mode {modes[0]!r} in {where}plan (modes: {", ".join(map(str, MODES))})'
    if not isinstance(segments, list) or not all(
            isinstance(s, list) and len(s) == 2 and all(isinstance(u, str) for u in s)
            for s in segments):
        return f'{where}segments must be [first unit, last unit] pairs'
    return None


def _buckets_problem(data):
    """Why the per-shape part of ``data`` is not a plan's, or None."""
    boxes = data.get('boxes_per_image')
    if boxes is not None and not _is_int(boxes):
        return f'boxes_per_image must be a non-negative int or null, got {boxes!r}'
    note = data.get('shapes_note')
    if note is not None and not isinstance(note, str):
        return f'shapes_note must be a string or null, got {note!r}'
    buckets = data.get('buckets')
    if buckets is not None:
        if not isinstance(buckets, list) or not buckets:
            return f'buckets must be a non-empty list, got {buckets!r}'
        for i, b in enumerate(buckets):
            where = f'buckets[{i}]'
            if not isinstance(b, dict):
                return f'{where} must be an object, got {b!r}'
            shape = b.get('shape')
            if not (isinstance(shape, list) and len(shape) == 2 and
                    all(_is_int(s, 1) for s in shape)):
                return f'{where}.shape must be [H, W] with positive ints, got {shape!r}'
            problem = _plan_problem(b.get('plan'), b.get('segments', []), f'{where}.')
            if problem:
                return problem
            for key in ('predicted_peak_bytes', 'measured_peak_bytes'):
                value = b.get(key)
                if (value is not None or key == 'predicted_peak_bytes') and not _is_int(value):
                    return f'{where}.{key} must be a non-negative int, got {value!r}'
            time = b.get('predicted_step_time')
            if time is not None and (isinstance(time, bool) or
                                     not isinstance(time, numbers.Real) or time < 0):
                return f'{where}.predicted_step_time must be a number >= 0, got {time!r}'
    model = data.get('cost_model')
    if model is not None:
        try:
            ShapeCostModel.from_dict(model)
        except (ValueError, KeyError, TypeError) as exc:
            return f'cost_model is not a cost model of batch shapes ({exc})'
    return None


def read_plan_file(path: str) -> dict[str, Any]:
    """The plan in ``path`` as a dict, or :class:`PlanFileError` naming the file, what is
    wrong and how to plan again."""
    how = (f'delete {path} to plan again when the run starts, or write a plan there with '
           f'`python tools/plan_memory.py CONFIG --out {path}`')
    try:
        with open(path, encoding='utf-8') as f:
            data = json.load(f)
    except (ValueError, UnicodeDecodeError) as exc:  # JSONDecodeError is a ValueError
        raise PlanFileError(f'{path} is not a memory plan: it is not valid JSON ({exc}); '
                            f'{how}') from exc
    problem = _problem(data)
    if problem:
        raise PlanFileError(f'{path} is not a memory plan of ckptzoo: {problem}; {how}')
    return data


def write_plan_file(path: str, result: PlanResult) -> None:
    """Write ``result`` to ``path`` as :func:`read_plan_file` reads it."""
    with open(path, 'w', encoding='utf-8') as f:
        json.dump(result.to_dict(), f, indent=1)


def plan_changes(saved: dict[str, Any], budget: int,
                 configured: dict[str, Any]) -> list[tuple[str, Any, Any]]:
    """``[(name, saved value, value now)]``: how the budget (bytes) and the options as
    configured (``samples_per_gpu``, ``cumulative_iters``, ``fp16``) differ from those the plan
    in ``saved`` was made for. A plan file without ``configured`` (written before it was
    recorded) is compared on the batch per optimizer step, which the outer search keeps."""
    changes = []
    if saved['budget_bytes'] != budget:
        changes.append(('memory_budget', format_budget(saved['budget_bytes']),
                        format_budget(budget)))
    before = saved.get('configured')
    if before is not None:
        changes += [(k, before[k], configured[k]) for k in _OPTIONS if before[k] != configured[k]]
    else:
        was = saved['samples_per_gpu'] * saved['cumulative_iters']
        now = configured['samples_per_gpu'] * configured['cumulative_iters']
        if was != now:
            changes.append(('samples_per_gpu x cumulative_iters', was, now))
    return changes
