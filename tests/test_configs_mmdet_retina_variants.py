"""mmdet 2.28.2's RetinaNet-variant and small one-stage configs build their models unchanged,
walked from the installed config tree: ``nas_fpn/`` (RetinaSepBNHead), ``ghm/`` (GHMC / GHMR),
``free_anchor/`` (FreeAnchorRetinaHead), the RetinaNets of ``pisa/`` (PISARetinaHead; its
Faster / Mask R-CNN and SSD configs are walked by the R-CNN-variant and light-backbone
tests), ``fsaf/`` (FSAF) and ``yolof/`` (YOLOF)."""
import os.path as osp

import pytest

from tests.helpers.mmdet_config_count import mmdet_configs_root, model_configs, try_build

ROOT = mmdet_configs_root()
FOLDERS = ('nas_fpn', 'ghm', 'free_anchor', 'pisa', 'fsaf', 'yolof')
CONFIGS = [n for n in model_configs(ROOT, FOLDERS)
           if not n.startswith('pisa/') or 'retinanet' in n] if ROOT else []

pytestmark = pytest.mark.skipif(ROOT is None, reason='mmdet 2.28.2 (its configs) not installed')


def test_the_16_configs_are_found():
    assert len(CONFIGS) == 16
    counts = {f: sum(n.startswith(f + '/') for n in CONFIGS) for f in FOLDERS}
    assert counts == dict(nas_fpn=2, ghm=4, free_anchor=3, pisa=2, fsaf=3, yolof=2)


@pytest.mark.parametrize('name', CONFIGS)
def test_config_builds_on_meta(name):
    reason = try_build(osp.join(ROOT, name))
    assert reason is None, reason
