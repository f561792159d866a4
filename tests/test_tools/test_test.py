"""tools/test.py with a checkpoint of another model: refused, naming the keys (mmdet loaded it
non-strictly and reported the accuracy of a random head)."""
import os.path as osp
import re

import pytest
import torch
from mmengine.config import Config

from ckptzoo.registry import build_model
from tests.tool_loader import load_tool

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
CONFIG = osp.join(ROOT, 'configs', 'smoke', 'classifier_synthetic.py')


def _tool():
    return load_tool('test.py')


@pytest.fixture(scope='module')
def checkpoint(tmp_path_factory):
    torch.manual_seed(0)
    path = tmp_path_factory.mktemp('ckpt') / 'epoch_1.pth'
    torch.save(dict(state_dict=build_model(Config.fromfile(CONFIG).model).state_dict()), path)
    return str(path)


@pytest.mark.parametrize('option,expected', [
    ('model.head.num_classes=10', r'2 shape mismatches: head.fc.weight \[4, 64\] in the '
                                  r'checkpoint, \[10, 64\] in the model'),
    ('model.backbone.depth=34', r'keys of the model missing from the checkpoint: '
                                r'backbone.layer1.2.conv1.weight, .* and \d+ more'),
])
def test_a_checkpoint_of_another_model_fails_naming_the_keys(checkpoint, option, expected):
    with pytest.raises(SystemExit) as info:
        _tool().main([CONFIG, checkpoint, '--eval', 'accuracy', '--cfg-options', option,
                      'data.workers_per_gpu=0'])
    assert str(info.value).startswith(f'error: checkpoint {checkpoint} does not fit the model '
                                      '(every tensor of the model needed)')
    assert re.search(expected, str(info.value)), str(info.value)


def test_the_matching_checkpoint_evaluates(checkpoint, capsys):
    _tool().main([CONFIG, checkpoint, '--eval', 'accuracy', '--cfg-options',
                  'data.workers_per_gpu=0'])
    assert 'accuracy_top-1' in capsys.readouterr().out
