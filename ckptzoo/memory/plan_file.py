"""``work_dir/memory_plan.json``: the plan a run trains with, read back when it resumes.

A file that is not such a plan (corrupt, truncated, another program's JSON) is refused with
its path and how to plan again, instead of a bare ``JSONDecodeError`` / ``KeyError``. A plan
made for another budget or batch is not reused silently: :func:`plan_changes` says what
changed, and the planner plans again.
"""
import json
import numbers

from .budget import format_bytes
from .cost_table import MODES

__all__ = ['PlanFileError', 'read_plan_file', 'plan_changes', 'REQUIRED']

#: the keys every plan file has, and their types
REQUIRED = dict(budget_bytes=int, predicted_peak_bytes=int, measured_peak_bytes=int, plan=dict,
                segments=list, fp16=bool, cumulative_iters=int, samples_per_gpu=int)
_OPTIONS = ('samples_per_gpu', 'cumulative_iters', 'fp16')


class PlanFileError(ValueError):
    """A ``memory_plan.json`` that cannot be read as a plan."""


def _problem(data):
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
    modes = [m for m in data['plan'].values() if m not in MODES]
    if modes:
        return f'unknown mode {modes[0]!r} in plan (modes: {", ".join(map(str, MODES))})'
    if not all(isinstance(s, list) and len(s) == 2 and all(isinstance(u, str) for u in s)
               for s in data['segments']):
        return 'segments must be [first unit, last unit] pairs'
    configured = data.get('configured')
    if configured is not None and (not isinstance(configured, dict)
                                   or set(configured) != set(_OPTIONS)):
        return f'configured must hold {", ".join(_OPTIONS)}, got {configured!r}'
    return None


def read_plan_file(path):
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


def plan_changes(saved, budget, configured):
    """``[(name, saved value, value now)]``: how the budget (bytes) and the options as
    configured (``samples_per_gpu``, ``cumulative_iters``, ``fp16``) differ from those the plan
    in ``saved`` was made for. A plan file without ``configured`` (written before it was
    recorded) is compared on the batch per optimizer step, which the outer search keeps."""
    changes = []
    if saved['budget_bytes'] != budget:
        changes.append(('memory_budget', format_bytes(saved['budget_bytes']),
                        format_bytes(budget)))
    before = saved.get('configured')
    if before is not None:
        changes += [(k, before[k], configured[k]) for k in _OPTIONS if before[k] != configured[k]]
    else:
        was = saved['samples_per_gpu'] * saved['cumulative_iters']
        now = configured['samples_per_gpu'] * configured['cumulative_iters']
        if was != now:
            changes.append(('samples_per_gpu x cumulative_iters', was, now))
    return changes
