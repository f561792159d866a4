"""mmdet 2.28.2's configs whose training pipeline names ``RandomCrop`` or ``AutoAugment``
(DETR, Deformable DETR, Sparse R-CNN / QueryInst ``*_crop_*``, the Swin / ConvNeXt / RF-Next
``ms-crop`` 3x schedules, the large-scale jittering of ``common/``, ``strong_baselines/``,
``simple_copy_paste/`` and Mask2Former, the ``crop640`` / ``crop896`` configs of FPG, NAS-FPN
and EfficientNet): walked from the installed config tree (a config counts when it or one of its
``_base_`` files names either type), each builds ``data.train`` unchanged on generated COCO
data placed where its ``data_root`` points and gives a training sample. Configs that still fail
for a reason outside these two transforms are listed with the reason.
"""
import os.path as osp
import re

import pytest
from mmengine.config import Config

from ckptzoo.datasets import build_dataset, generate_coco
from ckptzoo.datasets.synthetic_coco_panoptic import generate_coco_panoptic
from ckptzoo.datasets.batch_shapes import ORIENTATIONS, pipeline_bound
from ckptzoo.datasets.sample_seed import SeededIndex
from ckptzoo.registry import DATASETS
from tests.helpers.mmdet_config_count import mmdet_configs_root, model_configs

ROOT = mmdet_configs_root()
_NAMED = re.compile(r"""type\s*=\s*['"](RandomCrop|AutoAugment)['"]""")
_BASE = re.compile(r"""_base_\s*=\s*(\[[^\]]*\]|'[^']*'|"[^"]*")""", re.S)


def _names_them(path):
    """Whether the config file or one of its ``_base_`` files names RandomCrop/AutoAugment."""
    with open(path) as f:
        text = f.read()
    if _NAMED.search(text):
        return True
    base = _BASE.search(text)
    return bool(base) and any(
        _names_them(osp.normpath(osp.join(osp.dirname(path), b)))
        for b in re.findall(r"""['"]([^'"]+\.py)['"]""", base.group(1)))


CONFIGS = [c for c in model_configs(ROOT) if _names_them(osp.join(ROOT, c))] if ROOT else []

def _panoptic(name):
    return 'panoptic' in name or name.startswith('maskformer/')


# datasets that do not build yet, and why (outside RandomCrop / AutoAugment)
NOT_YET = {}
for _name in CONFIGS:
    if _panoptic(_name):
        if DATASETS.get('CocoPanopticDataset') is None:
            NOT_YET[_name] = "unknown dataset type 'CocoPanopticDataset'"
COCO_NAMES = ('person', 'bicycle', 'car')
PANOPTIC_STUFF = ('sand', 'sky-other-merged', 'wall-other-merged')

pytestmark = pytest.mark.skipif(ROOT is None, reason='mmdet 2.28.2 (its configs) not installed')


@pytest.fixture(scope='module')
def data_tree(tmp_path_factory):
    root = tmp_path_factory.mktemp('mmdet_crop_data')
    generate_coco(str(root / 'data' / 'coco'), num_train=4, num_val=2, img_size=(48, 64),
                  names=COCO_NAMES, cat_ids=(1, 2, 3))
    return root


@pytest.fixture(scope='module')
def panoptic_tree(tmp_path_factory):
    """COCO panoptic data (PNG maps) with COCO's names, for the panoptic configs."""
    root = tmp_path_factory.mktemp('mmdet_crop_panoptic_data')
    generate_coco_panoptic(str(root / 'data' / 'coco'), num_train=4, num_val=2,
                           img_size=(48, 64), names=COCO_NAMES + PANOPTIC_STUFF)
    return root


def test_the_configs_are_found():
    folders = {c.split('/')[0] for c in CONFIGS}
    assert len(CONFIGS) == 54, CONFIGS
    assert {'detr', 'deformable_detr', 'sparse_rcnn', 'queryinst', 'swin', 'convnext',
            'mask2former', 'maskformer', 'common', 'strong_baselines'} <= folders
    assert {c for c in CONFIGS if c.startswith('sparse_rcnn/')} == {
        'sparse_rcnn/sparse_rcnn_r101_fpn_300_proposals_crop_mstrain_480-800_3x_coco.py',
        'sparse_rcnn/sparse_rcnn_r50_fpn_300_proposals_crop_mstrain_480-800_3x_coco.py'}


def _types(transforms):
    """The built pipeline's transform types, AutoAugment's policies' included."""
    for t in transforms:
        yield type(t).__name__
        for policy in getattr(t, 'transforms', []):
            yield from _types(getattr(policy, 'transforms', []))


@pytest.mark.parametrize('name', CONFIGS)
def test_training_dataset_builds_and_gives_a_sample(name, data_tree, panoptic_tree, monkeypatch):
    monkeypatch.chdir(panoptic_tree if _panoptic(name) else data_tree)
    cfg = Config.fromfile(osp.join(ROOT, name), import_custom_modules=False)
    if name in NOT_YET:
        with pytest.raises(KeyError, match=NOT_YET[name]):
            build_dataset(cfg.data.train)
        pytest.xfail(NOT_YET[name])
    train = build_dataset(cfg.data.train)
    inner = train
    while hasattr(inner, 'dataset'):
        inner = inner.dataset
    assert 'RandomCrop' in set(_types(inner.pipeline.transforms))
    if '_scp_' in name:  # simple copy-paste: the partner's objects pasted by CopyPaste
        assert train.pipeline_types[0] == 'CopyPaste'
    # the memory planner's bound (of the sample's orientation) holds every sample's size
    bound = pipeline_bound(cfg)
    assert bound is not None
    first = next(i for i in range(len(train)) if len(train.get_ann_info(i)['labels']))
    for seed in range(3):
        sample = train[SeededIndex(first, seed=seed)]
        img = sample['img'].data
        assert img.dim() == 3 and img.shape[0] == 3
        boxes = sample['gt_bboxes'].data
        assert len(boxes) == len(sample['gt_labels'].data) > 0
        if 'gt_masks' in sample:
            masks = getattr(sample['gt_masks'], 'data', sample['gt_masks'])
            assert len(masks) == len(boxes)
        meta = getattr(sample['img_metas'], 'data', sample['img_metas'])
        h, w = meta['img_shape'][:2]
        assert img.shape[1] >= h and img.shape[2] >= w  # padded after the crop
        assert (boxes[:, 2] <= w + 1e-3).all() and (boxes[:, 3] <= h + 1e-3).all()
        oriented = pipeline_bound(cfg, ORIENTATIONS[int(train.flag[first])])
        assert img.shape[1] <= oriented[0] <= bound[0] and img.shape[2] <= oriented[1] <= bound[1]
