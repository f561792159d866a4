"""What a plan was made for, so that a resumed run reuses ``memory_plan.json`` only for that.

A plan names checkpoint units and was probed on batches of some shapes with some boxes. Put on
another model, it sets the modes of the units both have and leaves the others as configured
(or fails on a unit the model lacks); put on data with larger images or more boxes, its
predictions are for batches the loader no longer gives, and a step goes over the budget. So
the plan file records ``made_for``: the model (its checkpoint unit names and a digest of its
parameters' names, shapes and dtypes) and the data (the largest batch shape of each sampler
group, the most boxes per image and per batch, the number of images and a digest of their
sizes), and :func:`fit_changes` says what differs from the run that would reuse it.

A plan file written before ``made_for`` was recorded has only its unit names to go by
(:func:`unit_changes`): when they are the model's, the plan is reused with a note.
"""
from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch.nn as nn

    from ..datasets.batch_shapes import LoaderShapes

__all__ = ['model_fingerprint', 'data_fingerprint', 'made_for', 'fit_changes', 'unit_changes',
           'window_probed', 'plan_unit_names', 'made_for_problem']

#: unit names shown in a message before "and N more"
_SHOWN = 3


def model_fingerprint(model: nn.Module) -> dict[str, Any]:
    """``{'units': [checkpoint unit names], 'params': digest}`` of ``model`` (not its DDP
    wrapper): the digest covers each parameter's name, shape and dtype and the unit list, so
    that another depth, width, class count or head gives another one."""
    units = list(model.checkpoint_units()) if hasattr(model, 'checkpoint_units') else []
    digest = hashlib.sha256()
    for name, p in model.named_parameters():
        digest.update(f'{name}:{tuple(p.shape)}:{p.dtype}\n'.encode())
    digest.update(('units:' + ','.join(units)).encode())
    return dict(units=units, params=digest.hexdigest()[:16])


def data_fingerprint(shapes: LoaderShapes) -> dict[str, Any]:
    """What a plan's memory depends on in the batches ``shapes`` describes (of
    :func:`~ckptzoo.datasets.batch_shapes.loader_shapes`): the largest batch shape of each
    sampler group (``[flag, H, W]``; flag None: any images share a batch), the most boxes per
    image and per batch, whether the sizes came from the data, the number of images and a
    digest of their sizes. Frequencies are left out: they depend on the epochs simulated."""
    return dict(from_data=shapes.from_data,
                largest=list(shapes.worst) if shapes.worst is not None else None,
                groups=[[g.flag, *g.worst] for g in shapes.groups],
                max_boxes_per_image=shapes.max_boxes_per_image,
                max_boxes_per_batch=shapes.max_boxes_per_batch,
                images=sum(g.num_images for g in shapes.groups),
                image_sizes=shapes.image_sizes)


def made_for(model: nn.Module, shapes: LoaderShapes) -> dict[str, Any]:
    """The plan file's ``made_for``: ``{'model': ..., 'data': ...}``."""
    return dict(model=model_fingerprint(model), data=data_fingerprint(shapes))


def _names(names):
    shown = ', '.join(names[:_SHOWN])
    return shown + (f' and {len(names) - _SHOWN} more' if len(names) > _SHOWN else '')


def unit_changes(planned: list[str], units: list[str]) -> str | None:
    """How the unit names of a plan (``planned``) differ from the model's (``units``), as
    ``'model: N checkpoint units differ ...'``; None when they are the same set."""
    only_plan = [u for u in planned if u not in set(units)]
    only_model = [u for u in units if u not in set(planned)]
    if not only_plan and not only_model:
        return None
    parts = ([f'{len(only_model)} of the model\'s are not in the plan '
              f'({_names(only_model)})'] if only_model else []) + \
        ([f'{len(only_plan)} of the plan\'s are not in the model ({_names(only_plan)})']
         if only_plan else [])
    return (f'model: {len(only_plan) + len(only_model)} checkpoint units differ '
            f'({len(planned)} in the plan, {len(units)} in the model): ' + '; '.join(parts))


def _shape(s):
    return 'none' if s is None else f'{s[0]}x{s[1]}'


def _data_changes(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """What changed in the data, each ``'X is A now, B when planned'``."""
    out = []
    if old.get('from_data') != new.get('from_data'):
        out.append('the batch shapes come from the image sizes of the data now, from the '
                   'pipeline\'s bound when planned (the data was not there)' if new['from_data']
                   else 'the batch shapes are the pipeline\'s bound now (image sizes unknown), '
                   'they came from the data when planned')
    elif old.get('image_sizes') != new.get('image_sizes') or old.get('images') != \
            new.get('images'):
        out.append(f'the image sizes changed ({new.get("images")} images now, '
                   f'{old.get("images")} when planned)')
    if old.get('largest') != new.get('largest'):
        out.append(f'the largest batch shape is {_shape(new.get("largest"))} now, '
                   f'{_shape(old.get("largest"))} when planned')
    elif sorted(map(tuple, old.get('groups') or []), key=repr) != \
            sorted(map(tuple, new.get('groups') or []), key=repr):
        now = ', '.join(f'{_shape(g[1:])} (flag {g[0]})' for g in new.get('groups') or [])
        then = ', '.join(f'{_shape(g[1:])} (flag {g[0]})' for g in old.get('groups') or [])
        out.append(f'the largest batch shapes of the sampler groups are {now or "none"} now, '
                   f'{then or "none"} when planned')
    for key, what in (('max_boxes_per_image', 'the most ground-truth boxes per image'),
                      ('max_boxes_per_batch', 'the most ground-truth boxes per batch')):
        if old.get(key) != new.get(key):
            out.append(f'{what} is {new.get(key)} now, {old.get(key)} when planned')
    return out


def plan_unit_names(saved: dict[str, Any]) -> list[str]:
    """The unit names a plan file's plans and segments name, in order, once each."""
    names = list(saved.get('plan') or {})
    for bucket in saved.get('buckets') or []:
        names += list(bucket.get('plan') or {})
        names += [u for seg in bucket.get('segments') or [] for u in seg]
    names += [u for seg in saved.get('segments') or [] for u in seg]
    return list(dict.fromkeys(names))


def fit_changes(saved: dict[str, Any], now: dict[str, Any]) -> list[str]:
    """How the model and data of ``now`` (:func:`made_for` of the run) differ from those the
    plan file's content ``saved`` was made for: ``['model: ...', 'data: ...']``, empty when
    they are the same. A file without ``made_for`` is compared on its unit names alone."""
    before = saved.get('made_for')
    if before is None:
        change = unit_changes(plan_unit_names(saved), now['model']['units'])
        return [change] if change else []
    out = []
    old_model, new_model = before.get('model'), now['model']
    if old_model is not None:
        change = unit_changes(old_model['units'], new_model['units'])
        if change is None and old_model['params'] != new_model['params']:
            change = ('model: the parameters differ (their names, shapes or dtypes: another '
                      'width, class count or head), the checkpoint units are the same')
        if change:
            out.append(change)
    if before.get('data') is not None:
        data = _data_changes(before['data'], now['data'])
        if data:
            out.append('data: ' + '; '.join(data))
    return out


def window_probed(saved: dict[str, Any]) -> bool:
    """Whether the cost tables of a plan file were probed at the accumulation window its
    ``cumulative_iters`` gives (they record its ``window``; tables probed without the
    window's gradients predict too little); a file without a cost model cannot tell."""
    tables = (saved.get('cost_model') or {}).get('tables') or {}
    return not tables or all(t.get('window', 1) == saved['cumulative_iters']
                             for t in tables.values())


def made_for_problem(value: Any) -> str | None:
    """Why a plan file's ``made_for`` is not one :func:`made_for` writes, or None."""
    if not isinstance(value, dict):
        return f'made_for must be an object, got {value!r}'
    model = value.get('model')
    if model is not None and not (
            isinstance(model, dict) and isinstance(model.get('params'), str) and
            isinstance(model.get('units'), list) and
            all(isinstance(u, str) for u in model['units'])):
        return f'made_for.model must hold units (a list of names) and params (a str), ' \
               f'got {model!r}'
    data = value.get('data')
    if data is not None and not isinstance(data, dict):
        return f'made_for.data must be an object, got {data!r}'
    return None
