"""Loading transforms: the image from disk and the annotations from ``ann_info`` (mmdet 2.x).

Images are HWC numpy arrays, BGR, uint8 (as mmcv's ``imread``), read with OpenCV.
"""
import os.path as osp
import warnings

import cv2
import numpy as np

from ...registry import TRANSFORMS
from ...core.mask import BitmapMasks, PolygonMasks, poly2mask
from ..mask_ann import is_polygon_list, mask_ann_problem, process_polygons

_COLOR_FLAGS = {
    'color': cv2.IMREAD_COLOR,
    'grayscale': cv2.IMREAD_GRAYSCALE,
    'unchanged': cv2.IMREAD_UNCHANGED,
    'color_ignore_orientation': cv2.IMREAD_IGNORE_ORIENTATION | cv2.IMREAD_COLOR,
    'grayscale_ignore_orientation': cv2.IMREAD_IGNORE_ORIENTATION | cv2.IMREAD_GRAYSCALE,
}


def imread(filename, color_type='color', channel_order='bgr'):
    """mmcv.imread for a local file: HWC uint8, BGR unless ``channel_order='rgb'``."""
    if color_type not in _COLOR_FLAGS:
        raise ValueError(f'color_type must be one of {sorted(_COLOR_FLAGS)}, got {color_type!r}')
    if channel_order not in ('bgr', 'rgb'):
        raise ValueError(f"channel_order must be 'bgr' or 'rgb', got {channel_order!r}")
    # np.fromfile + imdecode also handles non-ASCII paths, which cv2.imread does not.
    try:
        buf = np.fromfile(filename, dtype=np.uint8)
    except OSError as e:
        raise FileNotFoundError(f'cannot read image file {filename!r}: {e}') from e
    img = cv2.imdecode(buf, _COLOR_FLAGS[color_type])
    if img is None:
        raise OSError(f'cannot decode image file {filename!r} (not an image OpenCV can read)')
    if img.ndim == 3 and img.shape[2] == 3 and channel_order == 'rgb':
        img = cv2.cvtColor(img, cv2.COLOR_BGR2RGB)
    return img


@TRANSFORMS.register_module()
class LoadImageFromFile:
    """mmdet 2.x ``LoadImageFromFile``; ``file_client_args`` only accepts the disk backend."""

    def __init__(self, to_float32=False, color_type='color', channel_order='bgr',
                 file_client_args=dict(backend='disk')):
        if file_client_args is not None and file_client_args.get('backend', 'disk') != 'disk':
            raise ValueError(f"only the 'disk' file client backend is supported, "
                             f"got {file_client_args!r}")
        if color_type not in _COLOR_FLAGS:
            raise ValueError(f'color_type must be one of {sorted(_COLOR_FLAGS)}, '
                             f'got {color_type!r}')
        if channel_order not in ('bgr', 'rgb'):
            raise ValueError(f"channel_order must be 'bgr' or 'rgb', got {channel_order!r}")
        self.to_float32 = to_float32
        self.color_type = color_type
        self.channel_order = channel_order

    def __call__(self, results):
        if results.get('img_prefix') is not None:
            filename = osp.join(results['img_prefix'], results['img_info']['filename'])
        else:
            filename = results['img_info']['filename']
        img = imread(filename, self.color_type, self.channel_order)
        if self.to_float32:
            img = img.astype(np.float32)
        results['filename'] = filename
        results['ori_filename'] = results['img_info']['filename']
        results['img'] = img
        results['img_shape'] = img.shape
        results['ori_shape'] = img.shape
        results['img_fields'] = ['img']
        return results

    def __repr__(self):
        return (f'{self.__class__.__name__}(to_float32={self.to_float32}, '
                f'color_type={self.color_type!r}, channel_order={self.channel_order!r})')


@TRANSFORMS.register_module()
class LoadImageFromWebcam(LoadImageFromFile):
    """mmdet 2.x: the image is already in ``results['img']`` (an array), as for
    :func:`ckptzoo.apis.inference_detector` on arrays."""

    def __call__(self, results):
        img = results['img']
        if self.to_float32:
            img = img.astype(np.float32)
        results['filename'] = None
        results['ori_filename'] = None
        results['img'] = img
        results['img_shape'] = img.shape
        results['ori_shape'] = img.shape
        results['img_fields'] = ['img']
        return results


@TRANSFORMS.register_module()
class LoadAnnotations:
    """mmdet 2.x ``LoadAnnotations``: boxes, labels, instance masks and semantic maps.

    ``with_seg`` reads ``seg_prefix`` + ``ann_info['seg_map']`` (COCO-stuff's PNGs for HTC) as
    it is stored (``'unchanged'``, squeezed) into ``results['gt_semantic_seg']``, listed in
    ``seg_fields``; a missing or unreadable map is an error naming the file and the image
    (datasets check every map before training: ``CustomDataset.check_semantic_maps``).

    ``with_mask`` reads ``ann_info['masks']`` (COCO ``segmentation``: polygons or RLE, one per
    gt box) into ``results['gt_masks']``, listed in ``mask_fields``: ``BitmapMasks`` of the
    image's size with ``poly2mask`` (as mmdet's ``_poly2mask``), else ``PolygonMasks`` of the
    polygons of at least 3 points (``process_polygons``). Fixes over mmdet: polygons of fewer
    than 3 points are dropped before rasterizing too (pycocotools read a first such polygon as
    a box); a mask that cannot be the image's (an RLE of another size, no valid polygon, an RLE
    with ``poly2mask=False``), masks missing or not one per box, or an image file whose size is
    not the annotated one, is an error naming the image; a mask that rasterizes empty is kept
    (mmdet trains on it) and warned about once.
    """

    def __init__(self, with_bbox=True, with_label=True, with_mask=False, with_seg=False,
                 poly2mask=True, denorm_bbox=False, file_client_args=dict(backend='disk'),
                 normed_bbox=None):
        if normed_bbox is not None:  # mmdet's ssd300 Open Images config (mmdet fails too)
            raise TypeError('LoadAnnotations has no normed_bbox; for normalised boxes (Open '
                            'Images) the argument is denorm_bbox=True, which scales them to '
                            'pixels')
        self.with_bbox = with_bbox
        self.with_label = with_label
        self.with_mask = with_mask
        self.with_seg = with_seg
        self.poly2mask = poly2mask
        self.denorm_bbox = denorm_bbox

    def _load_bboxes(self, results):
        ann_info = results['ann_info']
        bboxes = np.array(ann_info['bboxes'], dtype=np.float32).reshape(-1, 4)
        if self.denorm_bbox and bboxes.shape[0]:
            h, w = results['img_shape'][:2]
            bboxes[:, 0::2] *= w
            bboxes[:, 1::2] *= h
        results['gt_bboxes'] = bboxes
        gt_bboxes_ignore = ann_info.get('bboxes_ignore', None)
        if gt_bboxes_ignore is not None:
            results['gt_bboxes_ignore'] = np.array(gt_bboxes_ignore,
                                                   dtype=np.float32).reshape(-1, 4)
            results.setdefault('bbox_fields', []).append('gt_bboxes_ignore')
        results.setdefault('bbox_fields', []).append('gt_bboxes')
        return results

    def _load_masks(self, results):
        img_info = results['img_info']
        h, w = int(img_info['height']), int(img_info['width'])
        name = img_info.get('filename', img_info.get('file_name'))
        where = f'LoadAnnotations(with_mask=True): image {name!r}'
        img = results.get('img')
        if img is not None and tuple(img.shape[:2]) != (h, w):
            raise ValueError(f'{where}: the image file is {img.shape[0]} x {img.shape[1]} '
                             f'(height x width), its annotation says {h} x {w}; masks are '
                             f'made at the annotated size')
        masks = results['ann_info'].get('masks')
        if masks is None:
            raise ValueError(f'{where} has no instance masks (ann_info has no "masks"): the '
                             f'dataset gives none; use with_mask=False or a dataset with '
                             f'masks (COCO segmentation)')
        num_boxes = len(results['ann_info'].get('bboxes', masks))
        if len(masks) != num_boxes:
            raise ValueError(f'{where} has {len(masks)} masks for {num_boxes} gt boxes; '
                             f'there must be one mask per box')
        for k, mask_ann in enumerate(masks):
            problem, _ = mask_ann_problem(mask_ann, h, w)
            if problem is None and not self.poly2mask and not is_polygon_list(mask_ann):
                problem = ('it is an RLE and poly2mask=False keeps polygons only; use '
                           'poly2mask=True')
            if problem is not None:
                raise ValueError(f'{where}, instance {k}: {problem}')
        if self.poly2mask:
            gt_masks = BitmapMasks(
                [poly2mask(process_polygons(m) if is_polygon_list(m) else m, h, w)
                 for m in masks], h, w)
        else:
            gt_masks = PolygonMasks([process_polygons(m) for m in masks], h, w)
        _warn_empty(gt_masks, name)
        results['gt_masks'] = gt_masks
        results.setdefault('mask_fields', []).append('gt_masks')
        return results

    def __call__(self, results):
        if self.with_bbox:
            results = self._load_bboxes(results)
        if self.with_label:
            results['gt_labels'] = np.array(results['ann_info']['labels'], dtype=np.int64)
        if self.with_mask:
            results = self._load_masks(results)
        if self.with_seg:
            results = self._load_semantic_seg(results)
        return results

    def _load_semantic_seg(self, results):
        name = results.get('img_info', {}).get('filename')
        where = f'LoadAnnotations(with_seg=True): image {name!r}'
        seg_map = results['ann_info'].get('seg_map')
        if seg_map is None:
            raise ValueError(f'{where} has no seg_map in its annotation (CocoDataset sets it '
                             f'to the image name with .png)')
        if results.get('seg_prefix') is None:
            raise ValueError(f"{where}: the dataset has no seg_prefix (the semantic maps' "
                             f'folder, e.g. data/coco/stuffthingmaps/train2017/)')
        filename = osp.join(results['seg_prefix'], seg_map)
        try:
            seg = imread(filename, 'unchanged')
        except OSError as e:
            raise FileNotFoundError(f'{where}: cannot read its semantic map {filename!r}: '
                                    f'{e}') from None
        results['gt_semantic_seg'] = seg.squeeze()
        results.setdefault('seg_fields', []).append('gt_semantic_seg')
        return results

    def __repr__(self):
        return (f'{self.__class__.__name__}(with_bbox={self.with_bbox}, '
                f'with_label={self.with_label}, with_mask={self.with_mask}, '
                f'with_seg={self.with_seg}, '
                f'poly2mask={self.poly2mask})')


_empty_warned = []


def _warn_empty(gt_masks, name):
    """Once per process: an empty mask trains as in mmdet (its box still counts)."""
    if _empty_warned or not len(gt_masks):
        return
    empty = np.flatnonzero(np.asarray(gt_masks.areas) == 0)
    if len(empty):
        _empty_warned.append(name)
        warnings.warn(f'image {name!r}: instance mask(s) {empty.tolist()} are empty (no pixel '
                      f'inside the image); they are kept, as mmdet keeps them. Further empty '
                      f'masks are not reported.')


@TRANSFORMS.register_module()
class LoadProposals:
    """mmdet 2.x ``LoadProposals``: the image's precomputed proposals (``results['proposals']``,
    from the dataset's ``proposal_file``) as a float ``[n, 4]`` box field, at most
    ``num_max_proposals`` of them (all when None); an image without any gets one empty box
    ``[0, 0, 0, 0]``, as mmdet, so that every image has a RoI."""

    def __init__(self, num_max_proposals=None):
        if num_max_proposals is not None and (not isinstance(num_max_proposals, int)
                                              or num_max_proposals < 1):
            raise ValueError(f'LoadProposals num_max_proposals must be a positive int or '
                             f'None, got {num_max_proposals!r}')
        self.num_max_proposals = num_max_proposals

    def __call__(self, results):
        if 'proposals' not in results:
            raise KeyError('LoadProposals needs the dataset to have a proposal_file (no '
                           "'proposals' in the results)")
        proposals = np.asarray(results['proposals'])
        if proposals.ndim != 2 or proposals.shape[1] not in (4, 5):
            raise ValueError(f'proposals should have shapes (n, 4) or (n, 5), but found '
                             f'{proposals.shape}')
        proposals = proposals[:, :4]
        if self.num_max_proposals is not None:
            proposals = proposals[:self.num_max_proposals]
        if len(proposals) == 0:
            proposals = np.array([[0, 0, 0, 0]], dtype=np.float32)
        results['proposals'] = proposals
        results['bbox_fields'].append('proposals')
        return results

    def __repr__(self):
        return f'{self.__class__.__name__}(num_max_proposals={self.num_max_proposals})'


@TRANSFORMS.register_module()
class FilterAnnotations:
    """mmdet 2.x: drop the instances whose box is not wider than ``min_gt_bbox_wh[0]`` and
    taller than ``min_gt_bbox_wh[1]`` (``by_box``) and / or whose mask area is below
    ``min_gt_mask_area`` (``by_mask``), from ``gt_bboxes``, ``gt_labels`` and ``gt_masks``.
    When none is left, ``keep_empty=True`` returns None (mmdet's documented meaning: the
    dataset tries another image), False keeps the empty sample. An image that had no
    instance is returned unchanged."""

    def __init__(self, min_gt_bbox_wh=(1., 1.), min_gt_mask_area=1, by_box=True,
                 by_mask=False, keep_empty=True):
        if not (by_box or by_mask):
            raise ValueError('FilterAnnotations needs by_box=True or by_mask=True, got both '
                             'False')
        self.min_gt_bbox_wh = min_gt_bbox_wh
        self.min_gt_mask_area = min_gt_mask_area
        self.by_box = by_box
        self.by_mask = by_mask
        self.keep_empty = keep_empty

    def __call__(self, results):
        for needed, key in ((self.by_box, 'gt_bboxes'), (self.by_mask, 'gt_masks')):
            if needed and key not in results:
                raise KeyError(f'FilterAnnotations by_{key[3:-1]} needs {key!r} in the '
                               f'results (LoadAnnotations with_{key[3:-1]})')
        num = len(results['gt_bboxes']) if self.by_box else len(results['gt_masks'])
        if num == 0:
            return results
        keep = np.ones(num, dtype=bool)
        if self.by_box:
            bboxes = results['gt_bboxes']
            keep &= ((bboxes[:, 2] - bboxes[:, 0] > self.min_gt_bbox_wh[0]) &
                     (bboxes[:, 3] - bboxes[:, 1] > self.min_gt_bbox_wh[1]))
        if self.by_mask:
            keep &= results['gt_masks'].areas >= self.min_gt_mask_area
        keep = keep.nonzero()[0]
        for key in ('gt_bboxes', 'gt_labels', 'gt_masks'):
            if key in results:
                results[key] = results[key][keep]
        if keep.size == 0 and self.keep_empty:
            return None
        return results

    def __repr__(self):
        return (f'{self.__class__.__name__}(min_gt_bbox_wh={self.min_gt_bbox_wh}, '
                f'min_gt_mask_area={self.min_gt_mask_area}, by_box={self.by_box}, '
                f'by_mask={self.by_mask}, keep_empty={self.keep_empty})')


@TRANSFORMS.register_module()
class LoadPanopticAnnotations(LoadAnnotations):
    """mmdet 2.x ``LoadPanopticAnnotations``: boxes and labels as ``LoadAnnotations``, then
    the image's panoptic PNG (``seg_prefix`` + ``ann_info['seg_map']``, segment ids
    ``R + 256 G + 256**2 B``) gives ``gt_masks`` (``BitmapMasks`` of the non-crowd things, in
    the order of their boxes) and ``gt_semantic_seg`` (int32 as mmdet: each kept segment's
    label, things ``0 .. num_things - 1`` and stuff after them, 255 elsewhere: VOID, crowds'
    pixels keep their label).

    Fixes over mmdet: a missing or unreadable PNG, a PNG of another size than the image, a
    segment of the annotation absent from the PNG or a segment id in the PNG that the
    annotation does not list (``ann_info['segment_ids']``, from ``CocoPanopticDataset``) is an
    error naming the file."""

    def __init__(self, with_bbox=True, with_label=True, with_mask=True, with_seg=True,
                 file_client_args=dict(backend='disk')):
        super().__init__(with_bbox=with_bbox, with_label=with_label, with_mask=with_mask,
                         with_seg=with_seg, poly2mask=True, denorm_bbox=False,
                         file_client_args=file_client_args)

    def _load_masks_and_semantic_segs(self, results):
        from ...evaluation.panoptic_quality import VOID, rgb2id
        ann_info = results['ann_info']
        if results.get('seg_prefix') is None:
            raise ValueError("LoadPanopticAnnotations: the dataset has no seg_prefix (the "
                             "panoptic PNGs' folder)")
        filename = osp.join(results['seg_prefix'], ann_info['seg_map'])
        try:
            png = imread(filename, 'color', 'rgb')
        except (OSError, FileNotFoundError) as e:
            raise FileNotFoundError(f'LoadPanopticAnnotations: cannot read the panoptic PNG '
                                    f'{filename!r}: {e}') from None
        pan = rgb2id(png)
        info = results['img_info']
        h, w = int(info['height']), int(info['width'])
        if pan.shape != (h, w):
            raise ValueError(f'LoadPanopticAnnotations: panoptic PNG {filename!r} is '
                             f'{pan.shape[0]} x {pan.shape[1]}, its image is {h} x {w}')
        present = set(np.unique(pan).tolist())
        absent = [m['id'] for m in ann_info['masks'] if m['id'] not in present]
        listed = ann_info.get('segment_ids')
        unlisted = [] if listed is None else sorted(present - set(listed) - {VOID})
        if absent or unlisted:
            raise ValueError(
                f'LoadPanopticAnnotations: panoptic PNG {filename!r} does not match its '
                f'segments_info: ' + '; '.join(
                    ([f'segment ids {absent} are not in the PNG'] if absent else []) +
                    ([f'the PNG holds segment ids {unlisted} that segments_info does not '
                      f'list'] if unlisted else [])))
        gt_masks = []
        gt_seg = np.full(pan.shape, 255, dtype=np.int32)
        for mask_info in ann_info['masks']:
            mask = pan == mask_info['id']
            gt_seg[mask] = mask_info['category']
            if mask_info.get('is_thing'):
                gt_masks.append(mask.astype(np.uint8))
        if self.with_mask:
            results['gt_masks'] = BitmapMasks(gt_masks, h, w)
            results.setdefault('mask_fields', []).append('gt_masks')
        if self.with_seg:
            results['gt_semantic_seg'] = gt_seg
            results.setdefault('seg_fields', []).append('gt_semantic_seg')
        return results

    def __call__(self, results):
        if self.with_bbox:
            results = self._load_bboxes(results)
        if self.with_label:
            results['gt_labels'] = np.array(results['ann_info']['labels'], dtype=np.int64)
        if self.with_mask or self.with_seg:
            results = self._load_masks_and_semantic_segs(results)
        return results
