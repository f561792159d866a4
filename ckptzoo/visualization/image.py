"""Draw detections or ground truth on an image (mmdet 2.x's ``imshow_det_bboxes``), on
mmengine's :class:`~mmengine.visualization.Visualizer` (matplotlib underneath).

The image keeps its size and its pixels outside the drawn boxes, masks and labels; labels read
``class|score`` just above the box's top-left corner (inside it when the box touches the top),
their size adapted to the box area as mmdet. Instance masks are blended into the image as
mmdet 2.28.2's ``draw_masks`` does (``pixel * 0.2 + colour * 0.8`` inside the mask, the class
colour, nudged for each further instance so touching instances stay apart) and outlined in
white.
"""
import os
import os.path as osp

import numpy as np

from .palette import get_palette

__all__ = ['imshow_det_bboxes', 'imwrite', 'draw_masks']

#: the mask colour's weight in the blend (mmdet 2.28.2's ``draw_masks`` default, which
#: ``imshow_det_bboxes`` uses)
MASK_ALPHA = 0.8

_VISUALIZER = 'ckptzoo_imshow_det_bboxes'
_PX_PER_PT = 100 / 72  # the Visualizer's figures are 100 dpi: text height per point


def _visualizer():
    from mmengine.visualization import Visualizer
    return Visualizer.get_instance(_VISUALIZER)


def _adaptive_scales(areas, min_area=800, max_area=30000):
    """Font scale in [0.5, 1] growing with the box area (mmdet's ``_get_adaptive_scales``)."""
    return np.clip(0.5 + (areas - min_area) / (max_area - min_area), 0.5, 1.0)


def imwrite(img, out_file):
    """Write a BGR image; an unwritable place raises ``OSError`` naming the file (OpenCV
    only returns False)."""
    import cv2
    dirname = osp.dirname(osp.abspath(out_file))
    os.makedirs(dirname, exist_ok=True)
    ext = osp.splitext(out_file)[1] or '.png'
    ok, buf = cv2.imencode(ext, img)
    if not ok:
        raise ValueError(f'cannot encode an image as {ext!r} for {out_file}')
    try:
        buf.tofile(out_file)
    except OSError as e:
        raise OSError(f'cannot write the image {out_file}: {e.strerror or e}') from e


def _read(img):
    if isinstance(img, (str, os.PathLike)):
        from ..datasets.pipelines.loading import imread
        return imread(os.fspath(img))
    if not isinstance(img, np.ndarray) or img.ndim != 3 or img.shape[2] != 3:
        raise TypeError(f'img must be a path or an HxWx3 BGR uint8 array, got '
                        f'{getattr(img, "shape", type(img).__name__)}')
    return img


def _as_masks(segms, shape):
    """``(n, H, W)`` bool from an array, a list of (H, W) arrays / tensors or RLE dicts."""
    if isinstance(segms, np.ndarray):
        masks = segms
    else:
        import pycocotools.mask as mask_utils
        masks = [mask_utils.decode(m) if isinstance(m, dict) else
                 (m.detach().cpu().numpy() if hasattr(m, 'detach') else np.asarray(m))
                 for m in segms]
        masks = np.stack(masks) if masks else np.zeros((0,) + shape, bool)
    if masks.ndim != 3 or masks.shape[1:] != shape:
        raise ValueError(f'segms must be (n, {shape[0]}, {shape[1]}) masks of the image, got '
                         f'shape {masks.shape}')
    return masks.astype(bool)


def draw_masks(img, masks, colors, alpha=MASK_ALPHA):
    """Blend each mask into the RGB uint8 ``img`` (in place) with its colour; a colour already
    taken is nudged (mmdet's ``_get_bias_color``, from a fixed seed here, not numpy's global
    generator). Returns the masks' outlines (cv2 contours) for drawing."""
    from ..core.mask import bitmap_to_polygon
    rng = np.random.default_rng(0)
    taken, outlines = set(), []
    for mask, color in zip(masks, colors):
        color = np.asarray(color, dtype=np.int64)
        while tuple(color) in taken:
            color = np.clip(color + rng.integers(-30, 31, size=3), 0, 255)
        taken.add(tuple(color))
        img[mask] = img[mask] * (1 - alpha) + color * alpha
        outlines += bitmap_to_polygon(mask)[0]
    return outlines


def imshow_det_bboxes(img, bboxes=None, labels=None, segms=None, class_names=None,
                      score_thr=0, bbox_color='green', text_color='green', mask_color=None,
                      thickness=2, font_size=8, win_name='', show=True, wait_time=0,
                      out_file=None):
    """Draw ``bboxes`` on ``img`` and return the drawn BGR image (mmdet 2.x's arguments).

    Args:
        img (str | ndarray): a path or a BGR HxWx3 uint8 image.
        bboxes (ndarray): ``(n, 4)`` x1y1x2y2 or ``(n, 5)`` with scores.
        labels (ndarray): ``(n,)`` 0-based class indices.
        segms (ndarray | list | None): ``(n, H, W)`` instance masks of the image, one per box
            (bool arrays, tensors or RLE dicts), drawn with the class colour
            (``mask_color``, as ``bbox_color``); filtered by ``score_thr`` with the boxes.
        class_names (sequence[str] | None): label names (``class <i>`` when missing).
        score_thr (float): boxes with a lower score are not drawn (``(n, 5)`` boxes only).
        bbox_color, text_color: see :func:`~ckptzoo.visualization.get_palette`; a None
            ``bbox_color`` gives one distinct colour per class, a None ``text_color`` white
            text on the box colour (else the text colour on black, as mmdet).
        thickness (int): line width in pixels. font_size (int): label size in points at the
            largest boxes.
        show (bool): open a window; out_file (str | None): write the image there.
    """
    img = np.ascontiguousarray(_read(img))
    bboxes = np.zeros((0, 4), np.float32) if bboxes is None else np.asarray(bboxes)
    labels = np.zeros((0,), np.int64) if labels is None else np.asarray(labels)
    if bboxes.ndim != 2 or bboxes.shape[1] not in (4, 5):
        raise ValueError(f'bboxes must have shape (n, 4) or (n, 5), got {bboxes.shape}')
    if labels.ndim != 1 or labels.shape[0] != bboxes.shape[0]:
        raise ValueError(f'labels must have shape ({bboxes.shape[0]},), got {labels.shape}')
    if segms is not None:
        segms = _as_masks(segms, img.shape[:2])
        if len(segms) > len(bboxes):
            raise NotImplementedError(
                f'{len(segms)} masks for {len(bboxes)} boxes: masks without a box (mmdet labels '
                f'them at their centroids, for panoptic results) are not drawn; give one box '
                f'per mask')
        if len(segms) != len(bboxes):
            raise ValueError(f'segms must hold one mask per box ({len(bboxes)}), got '
                             f'{len(segms)}')
    if score_thr > 0 and bboxes.shape[1] == 5:
        keep = bboxes[:, -1] > score_thr
        bboxes, labels = bboxes[keep], labels[keep]
        segms = None if segms is None else segms[keep]
    if class_names is not None and len(labels) and labels.max() >= len(class_names):
        raise ValueError(f'label {int(labels.max())} out of range for {len(class_names)} '
                         f'class names')

    num_colors = max(len(class_names) if class_names else 0, int(labels.max(initial=-1)) + 1)
    bbox_palette = get_palette(bbox_color, num_colors)
    text_palette = get_palette(text_color, num_colors)
    vis = _visualizer()
    rgb = np.ascontiguousarray(img[..., ::-1])  # the Visualizer works in RGB
    outlines = []
    if segms is not None and len(segms):
        mask_palette = get_palette(mask_color, num_colors)
        outlines = draw_masks(rgb, segms, [mask_palette[i] for i in labels])
    vis.set_image(rgb)
    if outlines:
        vis.draw_polygons([o.astype(np.float64) for o in outlines], edge_colors='white',
                          line_widths=1, alpha=0.8)
    if len(bboxes):
        h, w = img.shape[:2]
        lim = np.array([w, h]) - 1e-3  # the Visualizer wants coordinates < width / height
        boxes = bboxes[:, :4].astype(np.float64).clip(0, np.tile(lim, 2))
        vis.draw_bboxes(boxes, edge_colors=[bbox_palette[i] for i in labels],
                        line_widths=thickness, alpha=1.0)
        areas = (boxes[:, 3] - boxes[:, 1]) * (boxes[:, 2] - boxes[:, 0])
        scales = _adaptive_scales(areas)
        texts = []
        for i, label in enumerate(labels):
            text = class_names[label] if class_names is not None else f'class {label}'
            if bboxes.shape[1] == 5:
                text += f'|{bboxes[i, 4]:.02f}'
            texts.append(text)
        if text_color is None:  # white on the class colour: readable on small images
            colors = ['white'] * len(texts)
            backgrounds = [bbox_palette[i] for i in labels]
        else:  # mmdet: the text colour on black
            colors = [text_palette[i] for i in labels]
            backgrounds = [(0, 0, 0)] * len(texts)
        # above the box where it fits (small objects stay visible), else inside its top
        sizes = font_size * scales
        above = boxes[:, 1] >= sizes * _PX_PER_PT + 2 * thickness
        # right-aligned to the box when the text (~0.6 em per character) would leave the image
        widths = np.array([0.6 * len(t) for t in texts]) * sizes * _PX_PER_PT
        right = boxes[:, 0] + widths > w
        positions = np.stack([np.where(right, boxes[:, 2] + thickness / 2,
                                       boxes[:, 0] - thickness / 2),
                              np.where(above, boxes[:, 1] - thickness / 2,
                                       boxes[:, 1] + thickness)], axis=1).clip(0, lim)
        vis.draw_texts(texts, positions, font_sizes=list(sizes), colors=colors,
                       vertical_alignments=['bottom' if a else 'top' for a in above],
                       horizontal_alignments=['right' if r else 'left' for r in right],
                       bboxes=[dict(facecolor=tuple(c / 255 for c in bg), alpha=0.8, pad=0.7,
                                    edgecolor='none') for bg in backgrounds])
    drawn = np.ascontiguousarray(vis.get_image()[..., ::-1])
    if show and out_file is None:
        vis.show(drawn[..., ::-1], win_name=win_name, wait_time=wait_time)
    if out_file is not None:
        imwrite(drawn, out_file)
    return drawn
