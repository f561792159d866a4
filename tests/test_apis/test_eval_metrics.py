"""ckptzoo.apis.eval_metrics: the metrics a model's test results can be evaluated by."""
import os.path as osp

import pytest

from ckptzoo.apis.config import load_config
from ckptzoo.apis.eval_metrics import check_test_metrics, model_metrics
from ckptzoo.datasets import CocoDataset
from ckptzoo.registry import build_model

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))


def _model(name, **model):
    cfg = load_config(osp.join(ROOT, 'configs', name))
    cfg.model.update(model)
    return build_model(cfg.model)


def test_what_each_model_can_be_evaluated_by():
    mask_rcnn = _model('coco/mask_rcnn_r18_fpn_synthetic_coco_cp.py')
    assert model_metrics(mask_rcnn, CocoDataset.METRICS) == ['bbox', 'segm', 'proposal']
    retinanet = _model('coco/retinanet_r18_fpn_synthetic_coco_cp.py')
    assert model_metrics(retinanet, CocoDataset.METRICS) == ['bbox', 'proposal']
    classifier = _model('smoke/classifier_synthetic.py')
    assert model_metrics(classifier, ('accuracy', )) == ['accuracy']
    assert model_metrics(classifier, CocoDataset.METRICS) == []


def test_check_passes_what_the_model_gives_and_refuses_what_the_dataset_lacks():
    class Coco(CocoDataset):  # METRICS is all the check reads
        def __init__(self):
            pass
    mask_rcnn = _model('coco/mask_rcnn_r18_fpn_synthetic_coco_cp.py')
    check_test_metrics(mask_rcnn, Coco(), ['bbox', 'segm'])
    with pytest.raises(ValueError, match=r"--eval 'accuracy' is not a metric of Coco: allowed "
                                         r"'bbox', 'segm', 'proposal'"):
        check_test_metrics(mask_rcnn, Coco(), 'accuracy')
