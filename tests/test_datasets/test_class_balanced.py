"""ClassBalancedDataset (mmdet 2.x's repeat factor sampling): the repeat indices and group
flags mmdet 2.28.2 gives (computed by mmdet on the same stub), the config form LVIS's configs
use, and bad arguments."""
import numpy as np
import pytest

from ckptzoo.datasets import ClassBalancedDataset, build_dataset


class Stub:
    CLASSES = ('a', 'b', 'c', 'd')
    cats = [[0], [0, 1], [0], [2], [], [0, 3], [0], [0, 1], [], [0]]
    flag = np.array([0, 1, 0, 1, 0, 1, 1, 0, 0, 1], np.uint8)

    def __len__(self):
        return len(self.cats)

    def get_cat_ids(self, i):
        return self.cats[i]

    def __getitem__(self, i):
        return i


# mmdet 2.28.2's repeat_indices on Stub
MMDET = {
    (0.1, True): list(range(10)),
    (0.1, False): list(range(10)),
    (0.3, True): [0, 1, 1, 2, 3, 3, 4, 5, 5, 6, 7, 7, 8, 9],
    (0.3, False): [0, 1, 1, 2, 3, 3, 4, 4, 5, 5, 6, 7, 7, 8, 8, 9],
    (0.5, True): [0, 1, 1, 2, 3, 3, 3, 4, 5, 5, 5, 6, 7, 7, 8, 9],
    (0.5, False): [0, 1, 1, 2, 3, 3, 3, 4, 4, 5, 5, 5, 6, 7, 7, 8, 8, 9],
}


@pytest.mark.parametrize('thr,filter_empty_gt', list(MMDET))
def test_repeat_indices_equal_mmdet(thr, filter_empty_gt):
    ds = ClassBalancedDataset(Stub(), thr, filter_empty_gt)
    assert ds.repeat_indices == MMDET[thr, filter_empty_gt]
    assert len(ds) == len(ds.repeat_indices)
    assert ds.flag.tolist() == [int(Stub.flag[i]) for i in ds.repeat_indices]
    assert [ds[i] for i in range(len(ds))] == ds.repeat_indices
    assert ds.get_cat_ids(2) == Stub.cats[ds.repeat_indices[2]]
    assert ds.CLASSES == Stub.CLASSES


def test_background_is_its_own_class():
    """mmdet keyed background images by len(CLASSES), which can be a real id; here never."""
    class Four(Stub):
        cats = [[4], [], [4], []]  # label 4 (a fifth class) and two empty images
        flag = np.zeros(4, np.uint8)
    ds = ClassBalancedDataset(Four(), 0.9, filter_empty_gt=False)
    # f(4) = f(background) = 0.5: both repeated ceil(sqrt(1.8)) = 2 times
    assert ds.repeat_indices == [0, 0, 1, 1, 2, 2, 3, 3]


def test_bad_arguments():
    with pytest.raises(ValueError, match='oversample_thr'):
        ClassBalancedDataset(Stub(), -1)
    with pytest.raises(TypeError, match='get_cat_ids'):
        ClassBalancedDataset([1, 2], 0.1)
    with pytest.raises(TypeError, match='build_dataset'):
        ClassBalancedDataset(dict(type='CocoDataset'), 0.1)


def test_builds_from_config(tmp_path):
    from ckptzoo.datasets import generate_coco
    root = generate_coco(str(tmp_path / 'coco'), num_train=6, num_val=1)
    ds = build_dataset(dict(type='ClassBalancedDataset', oversample_thr=0.5, dataset=dict(
        type='CocoDataset', classes=('circle', 'square', 'triangle'),
        ann_file=f'{root}/annotations/instances_train2017.json',
        img_prefix=f'{root}/train2017/', pipeline=[])))
    assert isinstance(ds, ClassBalancedDataset) and len(ds) >= len(ds.dataset)
