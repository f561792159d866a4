"""The training set's config, walked once: ``data.train`` may wrap its dataset
(``RepeatDataset`` and friends: ``dataset``), concatenate several (``ConcatDataset``:
``datasets``) or be a list (concatenated by ``build_dataset``). What the planner and the
stand-in data read from it (the pipeline, the classes, where to point ``--cfg-options``) is
the first dataset it trains on."""
from __future__ import annotations

from typing import Any

__all__ = ['innermost_train', 'train_pipeline']


def innermost_train(cfg: Any) -> tuple[str, Any]:
    """``(path, config)`` of the first dataset ``cfg.data.train`` trains on, through wrappers,
    ``ConcatDataset`` and lists; ``path`` is its ``--cfg-options`` key (``'data.train'``,
    ``'data.train.dataset'``, ``'data.train.datasets.0'``, ...). ``{}`` for an empty list."""
    path, train = 'data.train', cfg.data.train
    while True:
        if isinstance(train, (list, tuple)):  # concatenated by build_dataset
            path, train = path + '.0', (train[0] if train else {})
        elif 'pipeline' not in train and 'dataset' in train:  # RepeatDataset and friends
            path, train = path + '.dataset', train['dataset']
        elif 'pipeline' not in train and train.get('datasets'):  # ConcatDataset
            path, train = path + '.datasets', train['datasets']
        else:
            return path, train


def train_pipeline(cfg: Any) -> list[dict]:
    """The transforms of the first dataset ``cfg.data.train`` trains on (else the config's
    ``train_pipeline``); ``[]`` when it has none."""
    train = innermost_train(cfg)[1]
    return list(train.get('pipeline') or cfg.get('train_pipeline') or [])
