"""tools/test.py with a checkpoint of another model: refused, naming the keys (mmdet loaded it
non-strictly and reported the accuracy of a random head)."""
import os.path as osp
import re

import pytest
import torch
from mmengine.config import Config

from ckptzoo.registry import build_model
from tests.helpers.tools import load_tool

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


@pytest.mark.parametrize('evaluation', [None, 'evaluation=None'])
def test_the_matching_checkpoint_evaluates(checkpoint, capsys, evaluation):
    """Also from a config without in-training evaluation (``evaluation = None``)."""
    options = ['data.workers_per_gpu=0'] + ([evaluation] if evaluation else [])
    _tool().main([CONFIG, checkpoint, '--eval', 'accuracy', '--cfg-options', *options])
    assert 'accuracy_top-1' in capsys.readouterr().out


def _no_inference(tool, monkeypatch):
    def fail(*args, **kwargs):
        raise AssertionError('inference ran')
    monkeypatch.setattr(tool, 'single_gpu_test', fail)
    return tool


def test_a_metric_the_dataset_does_not_know_fails_before_inference(checkpoint, monkeypatch):
    tool = _no_inference(_tool(), monkeypatch)
    with pytest.raises(SystemExit, match=r"^error: --eval 'bbox' is not a metric of "
                                         r"SyntheticClassificationDataset: allowed 'accuracy'$"):
        tool.main([CONFIG, checkpoint, '--eval', 'bbox', '--cfg-options',
                   'data.workers_per_gpu=0'])


@pytest.mark.parametrize('metrics,message', [
    (['segm'], r"^error: --eval 'segm' evaluates masks, but the results of RetinaNet hold boxes "
               r"and proposals only \(it has no mask branch\): the metrics it can give on "
               r"CocoDataset are 'bbox', 'proposal'; nothing was run$"),
    (['bbox', 'segm'], r"--eval 'segm' evaluates masks"),
    (['mAP'], r"^error: --eval 'mAP' is not a metric of CocoDataset: allowed 'bbox', 'segm', "
              r"'proposal'$"),
])
def test_segm_on_a_model_without_a_mask_branch_fails_before_inference(tmp_path, monkeypatch,
                                                                      metrics, message):
    from ckptzoo.apis.config import load_config
    config = osp.join(ROOT, 'configs', 'coco', 'retinanet_r18_fpn_synthetic_coco_cp.py')
    root = tmp_path / 'coco'
    options = [f'synthetic_data.root={root}', 'synthetic_data.num_train=2',
               'synthetic_data.num_val=2', f'data.test.ann_file={root}/annotations/'
               'instances_val2017.json', f'data.test.img_prefix={root}/val2017/',
               'data.workers_per_gpu=0']
    path = tmp_path / 'retinanet.pth'
    torch.save(dict(state_dict=build_model(load_config(config).model).state_dict()), path)
    tool = _no_inference(_tool(), monkeypatch)
    with pytest.raises(SystemExit, match=message):
        tool.main([config, str(path), '--eval', *metrics, '--cfg-options', *options])
