"""init_detector / inference_detector / show_result and tools/test.py --show-dir on a small
RetinaNet (configs/retinanet_cp.py on a few generated images)."""
import os
import os.path as osp

import cv2
import numpy as np
import pytest
import torch
from mmengine.config import Config

from ckptzoo.apis import inference_detector, init_detector, single_gpu_test
from ckptzoo.datasets import build_dataloader, build_dataset
from ckptzoo.registry import build_detector
from tests.helpers.tools import load_tool

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
CONFIG = osp.join(ROOT, 'configs', 'retinanet_cp.py')
# small enough for a test: 2 images, a narrow network
SMALL = {'synthetic_data.num_trainval': 2, 'synthetic_data.num_test': 2,
         'model.backbone.base_channels': 8, 'model.neck.in_channels': [8, 16, 32, 64],
         'model.neck.out_channels': 16, 'model.bbox_head.in_channels': 16,
         'model.bbox_head.feat_channels': 16}


@pytest.fixture(scope='module')
def setup(tmp_path_factory):
    """The config on 2 test images under tmp, and a checkpoint whose head is biased so that
    some boxes score above 0.3."""
    tmp = tmp_path_factory.mktemp('inference')
    cfg = Config.fromfile(CONFIG)
    cfg.merge_from_dict(SMALL)
    root = str(tmp / 'data' / 'synthetic_voc')
    cfg.merge_from_dict({'synthetic_data.root': root})
    for split in ('val', 'test'):
        cfg.data[split].ann_file = cfg.data[split].ann_file.replace('data/synthetic_voc', root)
        cfg.data[split].img_prefix = cfg.data[split].img_prefix.replace('data/synthetic_voc',
                                                                        root)
    from ckptzoo.apis import prepare_synthetic_data
    prepare_synthetic_data(cfg)
    torch.manual_seed(0)
    model = build_detector(cfg.model)
    with torch.no_grad():
        model.bbox_head.retina_cls.bias.fill_(0.0)  # sigmoid 0.5 before the conv output
    ckpt = str(tmp / 'model.pth')
    torch.save(dict(state_dict=model.state_dict(),
                    meta=dict(CLASSES=['circle', 'square', 'triangle'])), ckpt)
    cfg_file = str(tmp / 'config.py')
    cfg.dump(cfg_file)
    return cfg, cfg_file, ckpt, tmp


def _test_images(cfg):
    prefix = cfg.data.test.img_prefix
    with open(cfg.data.test.ann_file) as f:
        ids = f.read().split()
    return [osp.join(prefix, 'JPEGImages', f'{i}.jpg') for i in ids]


def test_inference_matches_the_test_loader(setup):
    cfg, cfg_file, ckpt, _ = setup
    model = init_detector(cfg_file, ckpt, device='cpu')
    assert model.CLASSES == ('circle', 'square', 'triangle') and not model.training
    files = _test_images(cfg)
    test_cfg = dict(cfg.data.test)
    test_cfg.pop('samples_per_gpu')
    dataset = build_dataset(test_cfg, dict(test_mode=True))
    expected = single_gpu_test(model, build_dataloader(dataset, 1, 0, dist=False,
                                                       shuffle=False))
    one = inference_detector(model, files[0])
    many = inference_detector(model, files)
    arrays = inference_detector(model, [cv2.imread(f) for f in files])
    assert len(one) == 3 and all(r.shape[1] == 5 and r.dtype == np.float32 for r in one)
    assert sum(len(r) for r in one) > 0
    for ref, a, b in zip(expected, many, arrays):
        for ref_c, a_c, b_c in zip(ref, a, b):
            np.testing.assert_allclose(a_c, ref_c, rtol=0, atol=1e-4)
            np.testing.assert_allclose(b_c, ref_c, rtol=0, atol=1e-4)
    for a, b in zip(one, expected[0]):
        np.testing.assert_array_equal(a, b)  # the same batch of one


def test_show_result(setup, tmp_path):
    cfg, cfg_file, ckpt, _ = setup
    model = init_detector(cfg_file, ckpt, device='cpu')
    file = _test_images(cfg)[0]
    result = inference_detector(model, file)
    img = cv2.imread(file)
    drawn = model.show_result(file, result, score_thr=0.3)
    assert drawn.shape == img.shape and (drawn != img).any()
    none = model.show_result(file, [np.zeros((0, 5), np.float32)] * 3)
    np.testing.assert_array_equal(none, img)  # nothing above the threshold, nothing drawn
    out = str(tmp_path / 'drawn.png')
    assert model.show_result(img, result, out_file=out) is None
    np.testing.assert_array_equal(cv2.imread(out), drawn)


def _test_tool():
    return load_tool('test.py')


def test_show_dir(setup, tmp_path):
    cfg, cfg_file, ckpt, _ = setup
    tool = _test_tool()
    show_dir = tmp_path / 'shown'
    tool.main([cfg_file, ckpt, '--show-dir', str(show_dir), '--show-score-thr', '0.3'])
    files = _test_images(cfg)
    for file in files:
        out = show_dir / 'JPEGImages' / osp.basename(file)
        drawn, img = cv2.imread(str(out)), cv2.imread(file)
        assert drawn.shape == img.shape  # the original size, not the network input's


@pytest.mark.parametrize('where', ['read-only', 'under a file'])
def test_show_dir_not_writable(setup, tmp_path, where, capsys):
    cfg, cfg_file, ckpt, _ = setup
    if where == 'read-only':
        if hasattr(os, 'geteuid') and os.geteuid() == 0:
            pytest.skip('root writes into read-only folders')
        target = tmp_path / 'ro'
        target.mkdir()
        target.chmod(0o555)
    else:
        (tmp_path / 'file').write_text('x')
        target = tmp_path / 'file' / 'shown'
    with pytest.raises(SystemExit):
        _test_tool().parse_args([cfg_file, ckpt, '--show-dir', str(target)])
    assert f'--show-dir {target} is not a writable directory' in capsys.readouterr().err


def test_init_detector_refuses_a_checkpoint_of_another_class_count(setup):
    """mmdet's init_detector loaded it non-strictly: a random classification head."""
    from ckptzoo.runner.checkpoint_match import CheckpointMismatch
    _, cfg_file, ckpt, _ = setup
    with pytest.raises(CheckpointMismatch, match=rf'checkpoint {ckpt} does not fit the model '
                       r'.*2 shape mismatches: bbox_head.retina_cls.weight \[27, 16, 3, 3\] in '
                       r'the checkpoint, \[45, 16, 3, 3\] in the model'):
        init_detector(cfg_file, ckpt, device='cpu',
                      cfg_options={'model.bbox_head.num_classes': 5})
