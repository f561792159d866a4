"""AutoAugment (mmdet 2.x): one policy per call, each a Compose; argument errors."""
import numpy as np
import pytest

from ckptzoo.registry import build_transform


def test_policies_are_drawn_and_run():
    aug = build_transform(dict(type='AutoAugment', policies=[
        [dict(type='Resize', img_scale=(40, 40), keep_ratio=False)],
        [dict(type='Resize', img_scale=(20, 30), keep_ratio=False),
         dict(type='RandomFlip', flip_ratio=1.0)]]))
    shapes = set()
    for seed in range(20):
        np.random.seed(seed)
        res = aug(dict(img=np.zeros((10, 12, 3), np.float32), img_fields=['img'],
                       bbox_fields=[]))
        shapes.add((res['img'].shape[:2], res.get('flip', False)))
    assert shapes == {((40, 40), False), ((30, 20), True)}


@pytest.mark.parametrize('policies', [[], [[]], [[dict(img_scale=1)]], 'Resize'])
def test_bad_policies(policies):
    with pytest.raises(ValueError, match='AutoAugment policies'):
        build_transform(dict(type='AutoAugment', policies=policies))
