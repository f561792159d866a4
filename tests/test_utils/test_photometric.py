"""mmcv 1.x's photometric operations (``ckptzoo.utils.photometric``): the blends by hand,
dtypes kept, values clipped (mmdet's exact outputs are checked through the AutoAugment steps
in tests/test_datasets/test_auto_augment.py)."""
import cv2
import numpy as np
import pytest

from ckptzoo.utils.photometric import adjust_brightness, adjust_color, adjust_contrast, imequalize

IMG = np.array([[[10, 200, 30], [255, 0, 128]], [[0, 0, 0], [40, 80, 160]]], np.uint8)


def test_identity_at_factor_one():
    for fn in (adjust_color, adjust_brightness, adjust_contrast):
        out = fn(IMG, 1.0)
        assert out.dtype == np.uint8 and out.tolist() == IMG.tolist()


def test_blends_by_hand():
    gray = cv2.cvtColor(IMG, cv2.COLOR_BGR2GRAY).astype(np.float64)[..., None]
    expected = np.clip(np.round(IMG * 0.5 + gray * 0.5), 0, 255)
    assert np.abs(adjust_color(IMG, 0.5).astype(np.float64) - expected).max() <= 1
    assert adjust_brightness(IMG, 0.5).tolist() == (IMG.astype(np.float32) * 0.5).astype(
        np.uint8).tolist()
    assert adjust_brightness(IMG, 2.0).max() == 255  # clipped
    mean = round(gray.sum() / gray.size)
    assert (adjust_contrast(IMG, 0.0) == mean).all()
    floats = adjust_brightness(IMG.astype(np.float32), 3.0)
    assert floats.dtype == np.float32 and floats.max() == 255


def test_equalize():
    img = (np.arange(4800).reshape(40, 40, 3) * 7 % 97 // 4).astype(np.uint8)
    out = imequalize(img)
    assert out.dtype == np.uint8 and out.shape == img.shape
    assert out.max() > img.max()  # stretched over [0, 255]
    assert imequalize(IMG).tolist() == IMG.tolist()  # too few pixels: unchanged
    with pytest.raises(TypeError, match='integer'):
        imequalize(img.astype(np.float32))
