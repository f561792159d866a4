"""imshow_det_bboxes: the image keeps its size and pixels except where boxes and labels are."""
import cv2
import numpy as np
import pytest

from ckptzoo.visualization import get_palette, imshow_det_bboxes

NAMES = ('circle', 'square', 'triangle')


def _image():
    rng = np.random.RandomState(0)
    return rng.randint(0, 256, (160, 200, 3)).astype(np.uint8)


def test_pixels_change_only_at_boxes_and_labels(tmp_path):
    img = _image()
    bboxes = np.array([[20, 40, 130, 80, 0.9], [40, 110, 180, 150, 0.8],
                       [150, 5, 190, 30, 0.2]], np.float32)
    labels = np.array([0, 2, 1])
    out_file = str(tmp_path / 'sub' / 'drawn.jpg')
    drawn = imshow_det_bboxes(img.copy(), bboxes, labels, class_names=NAMES, score_thr=0.3,
                              bbox_color=None, text_color=None, thickness=2, font_size=13,
                              show=False, out_file=out_file)
    assert drawn.shape == img.shape and drawn.dtype == np.uint8
    assert cv2.imread(out_file).shape == img.shape
    changed = (drawn != img).any(-1)
    allowed = np.zeros_like(changed)
    for x1, y1, x2, y2, _ in bboxes[:2].astype(int):
        allowed[y1 - 2:y2 + 3, x1 - 2:x2 + 3] = True  # the box and its line
        allowed[y1 - 20:y1, x1 - 2:x2 + 3] = True  # the label above it
        allowed[y1 + 3:y2 - 2, x1 + 3:x2 - 2] = False  # but not inside it
    assert changed.any() and not (changed & ~allowed).any()
    palette = get_palette(None, 3)
    for (x1, y1, x2, y2, _), label in zip(bboxes[:2].astype(int), labels):
        # the left edge is drawn in the class colour (BGR in the returned image)
        mid = (y1 + y2) // 2
        np.testing.assert_allclose(drawn[mid, x1], palette[label][::-1], atol=2)
    assert not changed[:32, 145:].any()  # the box under score_thr is not drawn
    assert changed[25:40, 20:60].any() and changed[95:110, 40:80].any()  # the labels


def test_label_stays_in_the_image():
    img = _image()
    # at the top: the label goes inside; at the right edge: it ends at the box's right side
    bboxes = np.array([[2, 1, 80, 40, 0.95], [170, 100, 198, 140, 0.9]], np.float32)
    drawn = imshow_det_bboxes(img, bboxes, np.array([1, 2]), class_names=NAMES, show=False,
                              text_color=None, bbox_color=None, font_size=13)
    changed = (drawn != img).any(-1)
    assert changed[5:12, 5:40].all(-1).any() and not changed[16:38, 5:78].any()
    assert changed[88:100, 140:170].all()  # 'triangle|0.90' reaches left of its box
    assert not changed[:100, 90:130].any()


def test_bad_input():
    img = _image()
    with pytest.raises(ValueError, match='bboxes must have shape'):
        imshow_det_bboxes(img, np.zeros((2, 3)), np.zeros(2, int), show=False)
    with pytest.raises(ValueError, match='label 3 out of range for 3 class names'):
        imshow_det_bboxes(img, np.array([[1, 1, 9, 9]]), np.array([3]), class_names=NAMES,
                          show=False)
    with pytest.raises(NotImplementedError, match='masks'):
        imshow_det_bboxes(img, segms=np.zeros((1, 160, 200), bool), show=False)
    with pytest.raises(ValueError, match="unknown colour 'greenish'"):
        get_palette('greenish', 2)
    assert get_palette((1, 2, 3), 2) == [(1, 2, 3)] * 2
    assert len(set(get_palette(None, 20))) == 20


def _disc(h, w, cx, cy, r):
    ys, xs = np.mgrid[:h, :w]
    return (xs - cx) ** 2 + (ys - cy) ** 2 <= r ** 2


def test_masks_are_blended_inside_and_nothing_changes_outside():
    """mmdet 2.28.2's draw_masks: inside a mask, (1 - 0.8) * pixel + 0.8 * the colour (RGB,
    truncated to uint8); a white outline at the border; elsewhere the image is the one drawn
    without masks. A mask under score_thr is not drawn."""
    img = _image()
    bboxes = np.array([[20, 20, 100, 100, 0.9], [110, 60, 190, 140, 0.9],
                       [120, 5, 190, 50, 0.1]], np.float32)
    labels = np.array([0, 2, 1])
    masks = np.stack([_disc(160, 200, 60, 60, 30), _disc(160, 200, 150, 100, 25),
                      _disc(160, 200, 150, 25, 15)])
    kwargs = dict(class_names=NAMES, score_thr=0.3, bbox_color=None, text_color=None,
                  show=False)
    boxes_only = imshow_det_bboxes(img.copy(), bboxes, labels, **kwargs)
    drawn = imshow_det_bboxes(img.copy(), bboxes, labels, masks, **kwargs)
    changed = (drawn != boxes_only).any(-1)
    near = cv2.dilate(masks[:2].any(0).astype(np.uint8), np.ones((5, 5), np.uint8)) > 0
    assert not (changed & ~near).any()  # outside the drawn masks: as without masks
    assert not changed[masks[2]].any()  # under score_thr
    palette = get_palette(None, 3)
    for mask, label in zip(masks[:2], labels[:2]):
        inner = cv2.erode(mask.astype(np.uint8), np.ones((5, 5), np.uint8)) > 0
        assert changed[inner].all()
        rgb = img[inner][:, ::-1].astype(np.float64)
        expected = (rgb * (1 - 0.8) + np.array(palette[label]) * 0.8).astype(np.uint8)
        np.testing.assert_array_equal(drawn[inner][:, ::-1], expected)
    # one box per mask
    with pytest.raises(ValueError, match=r'one mask per box \(2\), got 1'):
        imshow_det_bboxes(img, bboxes[:2], labels[:2], masks[:1], show=False)


def test_two_instances_of_a_class_get_distinct_colours():
    img = np.zeros((40, 80, 3), np.uint8)
    masks = np.stack([_disc(40, 80, 20, 20, 10), _disc(40, 80, 60, 20, 10)])
    drawn = imshow_det_bboxes(img, np.array([[5, 5, 35, 35], [45, 5, 75, 35]], np.float32),
                              np.array([0, 0]), masks, show=False)
    assert (drawn[20, 20] != drawn[20, 60]).any()
