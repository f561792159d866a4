"""Which metrics a test can evaluate, checked before inference: ``tools/test.py --eval segm`` on
a model without a mask branch, or a metric the dataset does not know, failed only in
``dataset.evaluate``, after inference over the whole test set.

A metric needs the dataset to compute it (its ``METRICS``) and the model to give the results it
reads: ``segm`` masks (a mask branch), ``bbox`` and ``mAP`` boxes (a detector with a box
head), ``proposal`` boxes or proposals (any detector), ``accuracy`` class scores (a
classifier).
"""
from __future__ import annotations

from collections.abc import Sequence

import torch.nn as nn

__all__ = ['model_metrics', 'check_test_metrics']

#: what each metric reads from the results
_NEEDS = dict(segm='masks', bbox='boxes', mAP='boxes', proposal='proposals',
              accuracy='class scores')


def _gives(model: nn.Module) -> set[str] | None:
    """What ``model``'s test results hold (see ``_NEEDS``), None when it cannot be told."""
    from ..models.classifiers.image import ImageClassifier
    from ..models.detectors.base import BaseDetector
    from ..models.detectors.rpn import RPN
    if isinstance(model, RPN):
        return {'proposals'}
    if isinstance(model, BaseDetector):
        gives = {'proposals'}
        if model.with_bbox:
            gives.add('boxes')
        if model.with_mask:
            gives.add('masks')
        return gives
    if isinstance(model, ImageClassifier):
        return {'class scores'}
    return None


def model_metrics(model: nn.Module, metrics: Sequence[str]) -> list[str] | None:
    """The metrics of ``metrics`` (a dataset's) that ``model``'s results can be evaluated by;
    None when the model's results cannot be told."""
    gives = _gives(model)
    if gives is None:
        return None
    return [m for m in metrics if _NEEDS.get(m) is None or _NEEDS[m] in gives]


def check_test_metrics(model: nn.Module, dataset, metrics: str | Sequence[str],
                       where: str = '--eval') -> None:
    """Raise ``ValueError`` naming the metric and what is allowed when ``dataset`` cannot
    compute one of ``metrics`` or ``model``'s results lack what it reads."""
    from ..runner.hooks.evaluation import _evaluated
    given = [metrics] if isinstance(metrics, str) else list(metrics)
    for leaf in _evaluated(dataset):
        name = type(leaf).__name__
        allowed = getattr(leaf, 'METRICS', None)
        if allowed is None:
            continue
        unknown = [m for m in given if m not in allowed]
        if unknown:
            raise ValueError(f'{where} {unknown[0]!r} is not a metric of {name}: allowed '
                             f'{", ".join(map(repr, allowed))}')
        possible = model_metrics(model, allowed)
        if possible is None:
            continue
        for m in given:
            if m not in possible:
                gives = sorted(_gives(model))
                raise ValueError(
                    f'{where} {m!r} evaluates {_NEEDS[m]}, but the results of '
                    f'{type(model).__name__} hold {" and ".join(gives)} only'
                    + (' (it has no mask branch)' if m == 'segm' else '') +
                    f': the metrics it can give on {name} are '
                    f'{", ".join(map(repr, possible)) or "none"}; nothing was run')
