import numpy as np
import pytest
import torch
from PIL import Image
from torch.utils.data import DataLoader

from ckptzoo.registry import build_dataset


def _synthetic(**kw):
    return build_dataset(dict(dict(type='SyntheticClassificationDataset', num_samples=12,
                                   num_classes=3, img_size=32, seed=1), **kw))


def test_synthetic_items_collate_and_determinism():
    data = _synthetic()
    assert len(data) == 12 and data.CLASSES == ('class_0', 'class_1', 'class_2')
    item = data[0]
    assert item['img'].shape == (3, 32, 32) and item['img'].dtype == torch.float32
    assert item['gt_label'].dtype == torch.int64 and item['gt_label'].ndim == 0
    batch = next(iter(DataLoader(data, batch_size=4)))
    assert batch['img'].shape == (4, 3, 32, 32) and batch['gt_label'].shape == (4, )
    again = _synthetic()
    for i in range(len(data)):
        assert torch.equal(data[i]['img'], again[i]['img'])
        assert int(data[i]['gt_label']) == data.gt_labels[i]
    assert not torch.equal(_synthetic(seed=2)[0]['img'], item['img'])
    assert set(data.get_gt_labels()) == {0, 1, 2}
    # normalised with mean 0.5, std 0.25: pixels in [0, 1] map to [-2, 2]
    assert item['img'].min() >= -2 and item['img'].max() <= 2


def test_evaluate_accuracy():
    data = _synthetic()
    labels = data.get_gt_labels()
    perfect = [np.eye(3)[k] for k in labels]
    assert data.evaluate(perfect) == {'accuracy_top-1': 100.0}
    # first 3 samples: the true class second-best; the rest right
    mixed = []
    for i, k in enumerate(labels):
        s = np.array([0.1, 0.2, 0.3])
        s[k] = 0.9 if i >= 3 else 0.25
        if i < 3:
            s[(k + 1) % 3], s[(k + 2) % 3] = 0.5, 0.1
        mixed.append(s)
    res = data.evaluate(mixed, metric_options=dict(topk=(1, 2)))
    assert res['accuracy_top-1'] == pytest.approx(9 / 12 * 100)
    assert res['accuracy_top-2'] == pytest.approx(100.0)
    sub = data.evaluate(mixed[:4], indices=[0, 1, 2, 3])
    assert sub['accuracy_top-1'] == pytest.approx(25.0)
    with pytest.raises(ValueError, match="metric must be 'accuracy', got 'mAP'"):
        data.evaluate(perfect, metric='mAP')
    with pytest.raises(ValueError, match=r'topk must be ints in 1..3.*got \(4,\)'):
        data.evaluate(perfect, metric_options=dict(topk=4))


def test_custom_dataset_folders(tmp_path):
    rng = np.random.default_rng(0)
    for name, n in (('cat', 2), ('dog', 3)):
        (tmp_path / name).mkdir()
        for i in range(n):
            Image.fromarray(rng.integers(0, 255, (20, 30, 3), dtype=np.uint8)).save(
                tmp_path / name / f'{i}.png')
    (tmp_path / 'dog' / 'notes.txt').write_text('not an image')
    data = build_dataset(dict(type='ImageFolderDataset', data_prefix=str(tmp_path), img_size=16,
                              test_mode=True))
    assert data.CLASSES == ('cat', 'dog') and len(data) == 5
    assert list(data.get_gt_labels()) == [0, 0, 1, 1, 1]
    item = data[3]
    assert item['img'].shape == (3, 16, 16) and int(item['gt_label']) == 1
    batch = next(iter(DataLoader(data, batch_size=5)))
    assert batch['img'].shape == (5, 3, 16, 16)
    assert torch.equal(data[3]['img'], item['img'])  # test mode is deterministic
    train = build_dataset(dict(type='ImageFolderDataset', data_prefix=str(tmp_path), img_size=16))
    assert train[0]['img'].shape == (3, 16, 16)
    assert data.evaluate([np.eye(2)[k] for k in [0, 1, 1, 1, 1]]) == {'accuracy_top-1': 80.0}
    with pytest.raises(ValueError, match=r"class folders \['bird'\] not found"):
        build_dataset(dict(type='ImageFolderDataset', data_prefix=str(tmp_path),
                           classes=('cat', 'bird')))
