"""mmdet 2.x's ``CopyPaste`` (Simple Copy-Paste, Ghiasi et al. 2021), run by
:class:`~ckptzoo.datasets.MultiImageMixDataset` as in ``configs/simple_copy_paste/*_scp_*``:
objects of a partner image, already resized, cropped and padded to this image's size, are
pasted onto it; this image's objects lose the pixels the pasted ones cover.

Randomness: numpy's global generator (mmdet's ``from numpy import random``) with mmdet's
calls in mmdet's order (``randint`` for the partner, then ``randint`` for how many objects
and ``choice`` for which), so under the per-sample generator of
:mod:`ckptzoo.datasets.sample_seed` a sample is a function of (seed, epoch, index), and with
numpy seeded alike the draws are mmdet's own. (mmdet keeps it in ``transforms.py``; it sits
in its own module here, as that file is shared and near its size limit.)
"""
import numbers

import numpy as np

from ...core.mask.structures import BitmapMasks
from ...registry import TRANSFORMS

__all__ = ['CopyPaste']


def _boxes_to_masks(bboxes, img_shape):
    """One filled rectangle per box (``int()`` of each coordinate, as mmdet's)."""
    h, w = img_shape[:2]
    masks = np.zeros((len(bboxes), h, w), dtype=np.uint8)
    for i, (x1, y1, x2, y2) in enumerate(np.asarray(bboxes).reshape(-1, 4)):
        masks[i, int(y1):int(y2), int(x1):int(x2)] = 1
    return BitmapMasks(masks, h, w)


@TRANSFORMS.register_module()
class CopyPaste:
    """Paste objects of the partner image (``results['mix_results'][0]``) onto this one.

    With ``selected`` a random subset of the partner's objects is pasted: a count drawn
    uniformly in ``[0, min(n + 1, max_num_pasted))`` (so at most ``max_num_pasted - 1``),
    then that many distinct objects; without, all of them. The union of the pasted masks
    replaces this image's pixels and is cut out of its masks; its boxes become the tight
    boxes of the cut masks, and an object is kept when each box side moved by at most
    ``bbox_occluded_thr`` px or more than ``mask_occluded_thr`` px of its mask are left.
    The result is this image's kept objects followed by the pasted ones (``gt_bboxes``,
    ``gt_labels``, ``gt_masks`` as ``BitmapMasks``). Nothing to paste: the sample is
    unchanged. An image without ``gt_masks`` uses its boxes as masks, and then the output
    has no ``gt_masks`` (as mmdet's).

    Args (mmdet's): ``max_num_pasted`` 100, ``bbox_occluded_thr`` 10,
    ``mask_occluded_thr`` 300, ``selected`` True.

    Fixes over mmdet, each leaving mmdet's result wherever mmdet's is right:

    - an object whose mask is covered entirely is dropped; mmdet compared the empty mask's
      ``[0, 0, 0, 0]`` box with the old one, so an object within ``bbox_occluded_thr`` px
      of the top-left corner stayed as an empty mask with an empty box;
    - using boxes as masks holds for that call only (mmdet set ``paste_by_box`` once and
      then dropped the ``gt_masks`` of every later sample);
    - the image keeps its dtype (mmdet's product with an int64 mask made it int64, eight
      times the memory of the uint8 image, with the same values);
    - images of different sizes are refused with both sizes named (mmdet asserted).
    """

    #: images mixed into each item besides its own (the planner's box-count bound)
    num_partners = 1

    def __init__(self, max_num_pasted=100, bbox_occluded_thr=10, mask_occluded_thr=300,
                 selected=True):
        if not isinstance(selected, bool):
            raise TypeError(f'CopyPaste selected must be a bool, got {selected!r}')
        if not (isinstance(max_num_pasted, numbers.Integral) and
                not isinstance(max_num_pasted, bool) and max_num_pasted >= 0):
            raise ValueError(f'CopyPaste max_num_pasted must be a non-negative int, got '
                             f'{max_num_pasted!r}')
        if selected and max_num_pasted == 0:
            raise ValueError('CopyPaste max_num_pasted must be at least 1 with selected=True '
                             '(the count is drawn in [0, max_num_pasted)), got 0')
        for name, value in (('bbox_occluded_thr', bbox_occluded_thr),
                            ('mask_occluded_thr', mask_occluded_thr)):
            if not (isinstance(value, numbers.Real) and not isinstance(value, bool) and
                    value >= 0):
                raise ValueError(f'CopyPaste {name} must be a non-negative number, got '
                                 f'{value!r}')
        self.max_num_pasted = int(max_num_pasted)
        self.bbox_occluded_thr = bbox_occluded_thr
        self.mask_occluded_thr = mask_occluded_thr
        self.selected = selected

    def max_pasted(self, most):
        """The most objects one call pastes from a partner with at most ``most`` (the
        planner's box-count bound)."""
        return min(most, self.max_num_pasted - 1) if self.selected else most

    def get_indexes(self, dataset):
        """One partner, uniform over ``dataset`` (numpy's ``randint`` excludes the high end)."""
        return np.random.randint(0, len(dataset))

    def __call__(self, results):
        mix = results.get('mix_results')
        if mix is None:
            raise ValueError('CopyPaste needs the partner image in results["mix_results"] '
                             '(run it inside MultiImageMixDataset); the results have no '
                             '"mix_results"')
        if len(mix) != 1:
            raise ValueError(f'CopyPaste needs exactly one partner image in '
                             f'results["mix_results"], got {len(mix)}')
        src = mix[0]
        by_box = False
        for item in (results, src):
            if item.get('gt_masks') is None:
                if 'gt_bboxes' not in item:
                    raise KeyError('CopyPaste needs "gt_masks" or "gt_bboxes" in the results '
                                   'of both images (LoadAnnotations with_mask / with_bbox)')
                item['gt_masks'] = _boxes_to_masks(item['gt_bboxes'], item['img'].shape)
                by_box = True
            elif not isinstance(getattr(item['gt_masks'], 'masks', None), np.ndarray):
                raise TypeError(f'CopyPaste needs bitmap masks (LoadAnnotations with '
                                f'poly2mask=True), got {type(item["gt_masks"]).__name__}')
        if self.selected:
            src = self._select(src)
        out = self._paste(results, src)
        if by_box:
            out.pop('gt_masks')
        return out

    def _select(self, src):
        """A random subset of the partner's objects (mmdet's two draws)."""
        n = src['gt_bboxes'].shape[0]
        count = np.random.randint(0, min(n + 1, self.max_num_pasted))
        keep = np.random.choice(n, size=count, replace=False)
        return dict(src, gt_bboxes=src['gt_bboxes'][keep], gt_labels=src['gt_labels'][keep],
                    gt_masks=src['gt_masks'][keep])

    def _paste(self, dst, src):
        if len(src['gt_bboxes']) == 0:
            return dst
        dst_img, src_img = dst['img'], src['img']
        dst_masks = dst['gt_masks'].masks
        if src_img.shape != dst_img.shape or dst_masks.shape[1:] != dst_img.shape[:2]:
            raise ValueError(f'CopyPaste needs images (and masks) of one size: this image is '
                             f'{dst_img.shape}, its masks {dst_masks.shape[1:]}, the partner '
                             f'{src_img.shape} (pad both to one size first, e.g. Pad size)')
        covered = src['gt_masks'].masks.any(axis=0)
        h, w = covered.shape
        cut = BitmapMasks(np.where(covered, 0, dst_masks).astype(dst_masks.dtype), h, w)
        boxes = cut.get_bboxes()
        areas = cut.masks.sum(axis=(1, 2))
        near = np.all(np.abs(boxes - dst['gt_bboxes']) <= self.bbox_occluded_thr, axis=-1)
        keep = (near | (areas > self.mask_occluded_thr)) & (areas > 0)
        dst['img'] = np.where(covered[..., None], src_img, dst_img)
        dst['gt_bboxes'] = np.concatenate([boxes[keep], src['gt_bboxes']])
        dst['gt_labels'] = np.concatenate([dst['gt_labels'][keep], src['gt_labels']])
        masks = np.concatenate([cut.masks[keep], src['gt_masks'].masks])
        dst['gt_masks'] = BitmapMasks(masks, h, w)
        return dst

    def __repr__(self):
        return (f'{type(self).__name__}(max_num_pasted={self.max_num_pasted}, '
                f'bbox_occluded_thr={self.bbox_occluded_thr}, '
                f'mask_occluded_thr={self.mask_occluded_thr}, selected={self.selected})')
