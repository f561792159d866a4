"""CustomDataset (the middle format): instance masks are checked when the pipeline loads them."""
import pickle

import numpy as np
import pytest

from ckptzoo.datasets import CustomDataset

LOAD_MASKS = [dict(type='LoadAnnotations', with_mask=True)]


def _write(tmp_path, masks):
    ann = dict(bboxes=np.array([[1, 1, 9, 9]], np.float32), labels=np.array([0]))
    if masks is not None:
        ann['masks'] = masks
    path = tmp_path / 'ann.pkl'
    path.write_bytes(pickle.dumps([dict(filename='a.jpg', width=40, height=40, ann=ann)]))
    return str(path)


def test_middle_format_masks_are_checked_when_the_dataset_is_built(tmp_path):
    ok = _write(tmp_path, [[[1, 1, 9, 1, 9, 9]]])
    ds = CustomDataset(ok, LOAD_MASKS, classes=('a', ), filter_empty_gt=False)
    assert ds.get_ann_info(0)['masks'] == [[[1, 1, 9, 1, 9, 9]]]
    with pytest.raises(ValueError, match=r"CustomDataset '.*ann\.pkl': image 'a\.jpg' has no "
                                         r"instance masks"):
        CustomDataset(_write(tmp_path, None), LOAD_MASKS, classes=('a', ),
                      filter_empty_gt=False)
    with pytest.raises(ValueError, match=r"image 'a\.jpg' has 2 masks for 1 boxes"):
        CustomDataset(_write(tmp_path, [[[1, 1, 9, 1, 9, 9]]] * 2), LOAD_MASKS,
                      classes=('a', ), filter_empty_gt=False)
    with pytest.raises(ValueError, match=r"image 'a\.jpg', mask 0: the RLE mask has size"):
        CustomDataset(_write(tmp_path, [dict(size=[20, 40], counts=[800])]), LOAD_MASKS,
                      classes=('a', ), filter_empty_gt=False)
    CustomDataset(_write(tmp_path, None), [dict(type='LoadAnnotations')], classes=('a', ),
                  filter_empty_gt=False)  # no masks asked for: fine
