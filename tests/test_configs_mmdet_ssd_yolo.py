"""mmdet 2.28.2's SSD and YOLOv3 configs build their models unchanged, walked from the installed
config tree: the folders ``ssd/``, ``yolo/``, ``wider_face/``, ``pascal_voc/`` and
``legacy_1.x/`` (whose other configs, Faster R-CNN / RetinaNet / ..., build too), and each SSD /
YOLOv3 head's output channels fit its anchors (a meta forward of the whole model)."""
import os.path as osp
import warnings

import pytest
import torch

from tests.helpers.mmdet_config_count import mmdet_configs_root, model_configs, try_build

ROOT = mmdet_configs_root()
FOLDERS = ('ssd', 'yolo', 'wider_face', 'pascal_voc', 'legacy_1.x')
CONFIGS = model_configs(ROOT, FOLDERS) if ROOT else []
# what still fails, and why (not this family's parts)
NOT_YET = {}

pytestmark = pytest.mark.skipif(ROOT is None, reason='mmdet 2.28.2 (its configs) not installed')


def test_the_25_configs_are_found():
    assert len(CONFIGS) == 25 and not NOT_YET
    assert sum(n.startswith(('ssd', 'pascal_voc/ssd', 'legacy_1.x/ssd', 'wider_face'))
               for n in CONFIGS) == 10
    assert sum(n.startswith('yolo') for n in CONFIGS) == 6


@pytest.mark.parametrize('name', CONFIGS)
def test_config_builds_on_meta(name):
    reason = try_build(osp.join(ROOT, name))
    if name in NOT_YET:
        assert reason is not None and NOT_YET[name] in reason, reason
        pytest.xfail(f'needs {NOT_YET[name]}: {reason[:80]}')
    assert reason is None, reason


SSD_YOLO = [n for n in CONFIGS if n not in NOT_YET and (
    'ssd' in n or 'yolo' in n or 'wider_face' in n)]


@pytest.mark.parametrize('name', SSD_YOLO)
def test_head_outputs_fit_the_anchors_on_meta(name):
    from mmengine.config import Config

    from ckptzoo.registry import build_model
    cfg = Config.fromfile(osp.join(ROOT, name), import_custom_modules=False)
    size = 320 if 'yolo' in name or 'ssdlite' in name else (512 if '512' in name else 300)
    with warnings.catch_warnings(), torch.device('meta'):
        warnings.simplefilter('ignore')
        model = build_model(cfg.model).eval()
        with torch.no_grad():
            outs = model.forward_dummy(torch.empty(1, 3, size, size))
    head = model.bbox_head
    priors = head.prior_generator.num_base_priors
    if type(head).__name__ == 'YOLOV3Head':
        (pred_maps, ) = outs
        assert [p.shape[1] for p in pred_maps] == [n * (5 + head.num_classes) for n in priors]
        assert [p.shape[-1] for p in pred_maps] == [size // s for s in head.featmap_strides]
    else:
        cls_scores, bbox_preds = outs
        assert [c.shape[1] for c in cls_scores] == [n * (head.num_classes + 1) for n in priors]
        assert [b.shape[1] for b in bbox_preds] == [n * 4 for n in priors]


def _pipelines(node):
    """Every ``pipeline`` list under a config's ``data``."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key == 'pipeline' and isinstance(value, list):
                yield value
            else:
                yield from _pipelines(value)
    elif isinstance(node, (list, tuple)):
        for value in node:
            yield from _pipelines(value)


@pytest.mark.parametrize('name', [n for n in SSD_YOLO if 'legacy' not in n])
def test_data_pipelines_build(name):
    """The train and test pipelines (Expand, MinIoURandomCrop, PhotoMetricDistortion, ...)
    build unchanged."""
    from mmengine.config import Config

    from ckptzoo.datasets.pipelines import Compose
    cfg = Config.fromfile(osp.join(ROOT, name), import_custom_modules=False)
    pipelines = list(_pipelines(cfg.to_dict()['data']))
    assert pipelines
    types = set()
    for pipeline in pipelines:
        Compose(pipeline)
        types |= {t['type'] for t in pipeline}
    if 'ssd' in name or 'yolo' in name:
        assert {'PhotoMetricDistortion', 'MinIoURandomCrop', 'Expand'} & types
