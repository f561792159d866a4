"""The training set's config walked once: through wrappers, ConcatDataset and lists to the first
dataset trained on, with its --cfg-options path."""
from mmengine.config import Config

from ckptzoo.datasets.train_config import innermost_train, train_pipeline

PIPE = [dict(type='LoadImageFromFile'), dict(type='Resize', img_scale=(64, 64))]
LEAF = dict(type='CocoDataset', ann_file='a.json', pipeline=PIPE)


def _cfg(train, **top):
    return Config(dict(data=dict(train=train), **top))


def test_walks_wrappers_concatenations_and_lists():
    assert innermost_train(_cfg(LEAF)) == ('data.train', LEAF)
    repeat = dict(type='RepeatDataset', times=3, dataset=LEAF)
    assert innermost_train(_cfg(repeat)) == ('data.train.dataset', LEAF)
    concat = dict(type='ConcatDataset', datasets=[repeat, dict(LEAF, ann_file='b.json')])
    assert innermost_train(_cfg(concat)) == ('data.train.datasets.0.dataset', LEAF)
    assert innermost_train(_cfg([LEAF, dict(LEAF, ann_file='b.json')]))[0] == 'data.train.0'
    assert train_pipeline(_cfg(concat)) == PIPE


def test_the_top_level_pipeline_when_the_dataset_has_none():
    bare = dict(type='CocoDataset', ann_file='a.json')
    assert train_pipeline(_cfg(bare, train_pipeline=PIPE)) == PIPE
    assert train_pipeline(_cfg([])) == []
