"""tools/misc/browse_dataset.py and tools/misc/print_config.py, in-process."""
import os.path as osp
import xml.etree.ElementTree as ET

import cv2
import numpy as np
import pytest

from ckptzoo.visualization import get_palette
from tests.helpers.tools import load_tool

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
CONFIG = osp.join(ROOT, 'configs', 'retinanet_cp.py')


def _tool(name):
    return load_tool(f'misc/{name}.py')


def test_browse_dataset_draws_the_ground_truth(tmp_path):
    root = str(tmp_path / 'voc')
    voc = f'{root}/VOCdevkit/VOC2007/'
    out = tmp_path / 'browse'
    _tool('browse_dataset').main([
        CONFIG, '--output-dir', str(out), '--cfg-options', f'synthetic_data.root={root}',
        'synthetic_data.num_trainval=3', 'synthetic_data.num_test=1',
        f'data.train.ann_file={voc}ImageSets/Main/trainval.txt', f'data.train.img_prefix={voc}',
        'data.train.pipeline.3.flip_ratio=0.0'])
    with open(f'{voc}ImageSets/Main/trainval.txt') as f:
        ids = f.read().split()
    assert sorted(p.name for p in out.iterdir()) == sorted(f'{i}.jpg' for i in ids)
    palette = get_palette(None, 3)
    classes = ('circle', 'square', 'triangle')
    for i in ids:
        drawn = cv2.imread(str(out / f'{i}.jpg'))
        src = cv2.imread(f'{voc}JPEGImages/{i}.jpg')
        scale = min(128 / src.shape[0], 128 / src.shape[1])  # Resize (128, 128), keep ratio
        assert drawn.shape == (128, 128, 3)  # padded to a multiple of 32
        for obj in ET.parse(f'{voc}Annotations/{i}.xml').findall('object'):
            box = obj.find('bndbox')
            x1, y1, y2 = (float(box.find(k).text) for k in ('xmin', 'ymin', 'ymax'))
            x, y = int(round((x1 - 1) * scale)), int(round((y1 + y2) / 2 * scale))
            color = palette[classes.index(obj.find('name').text)][::-1]
            # the left edge of the ground-truth box, in its class colour (JPEG tolerance)
            assert np.abs(drawn[y, x].astype(int) - color).max() < 60, (i, drawn[y, x], color)


def test_print_config(capsys):
    cfg = _tool('print_config').main([CONFIG, '--cfg-options', 'optimizer.lr=0.5'])
    text = capsys.readouterr().out
    assert text.startswith('Config:\n')
    assert "type='RetinaNet'" in text and 'lr=0.5' in text  # the _base_ model, the override
    assert cfg.optimizer.lr == 0.5
    with pytest.raises(SystemExit, match='config file not found: nope.py'):
        _tool('print_config').main(['nope.py'])
