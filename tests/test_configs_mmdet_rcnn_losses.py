"""mmdet 2.28.2's configs that the two-stage building blocks unlock (the IoU-family,
balanced-L1 and seesaw losses, the OHEM / Libra samplers, the legacy 1.x coder and anchors)
build their models unchanged: the folders ``seesaw_loss/``, ``legacy_1.x/``, ``libra_rcnn/``
and every config of the tree that names one of these types, found by reading the files."""
import os.path as osp

import pytest

from tests.helpers.mmdet_config_count import mmdet_configs_root, model_configs, try_build

ROOT = mmdet_configs_root()
FOLDERS = ('seesaw_loss', 'legacy_1.x', 'libra_rcnn')
TYPES = ('IoULoss', 'BoundedIoULoss', 'GIoULoss', 'DIoULoss', 'CIoULoss', 'BalancedL1Loss',
         'SeesawLoss', 'OHEMSampler', 'CombinedSampler', 'IoUBalancedNegSampler',
         'InstanceBalancedPosSampler', 'LegacyDeltaXYWHBBoxCoder', 'NormedLinear')
# two-stage detectors only: the one-stage families (FCOS, ATSS, ...) that use these losses
# come with their heads
TWO_STAGE_FOLDERS = ('faster_rcnn', 'mask_rcnn', 'cascade_rcnn') + FOLDERS
# what still fails, and why (other families' building blocks)
NOT_YET = {}


def _names_a_type(rel):
    text = open(osp.join(ROOT, rel)).read()
    return any(f"'{t}'" in text for t in TYPES)


CONFIGS = sorted(set(model_configs(ROOT, FOLDERS)) | {
    r for r in model_configs(ROOT, TWO_STAGE_FOLDERS) if _names_a_type(r)}) if ROOT else []

pytestmark = pytest.mark.skipif(ROOT is None, reason='mmdet 2.28.2 (its configs) not installed')


def test_the_unlocked_configs_are_found():
    assert len(model_configs(ROOT, ('seesaw_loss', ))) == 12
    assert len(model_configs(ROOT, ('legacy_1.x', ))) == 6
    assert {'faster_rcnn/faster_rcnn_r50_fpn_iou_1x_coco.py',
            'faster_rcnn/faster_rcnn_r50_fpn_bounded_iou_1x_coco.py',
            'faster_rcnn/faster_rcnn_r50_fpn_ciou_1x_coco.py',
            'faster_rcnn/faster_rcnn_r50_fpn_giou_1x_coco.py',
            'faster_rcnn/faster_rcnn_r50_fpn_ohem_1x_coco.py'} <= set(CONFIGS)


@pytest.mark.parametrize('name', CONFIGS)
def test_config_builds_on_meta(name):
    reason = try_build(osp.join(ROOT, name))
    if reason is not None and name in NOT_YET:
        pytest.xfail(f'needs {NOT_YET[name]}: {reason}')
    assert reason is None
