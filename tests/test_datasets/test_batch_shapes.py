"""loader_shapes against the real loader: the batch shapes and box counts it predicts are the
ones ``build_dataloader`` gives, epoch after epoch, group by group."""
import json
import os.path as osp
from collections import Counter

import numpy as np
import pytest
from mmengine.config import Config

from ckptzoo.datasets import build_dataloader, build_dataset, generate_coco
from ckptzoo.datasets.pipelines.transforms import Resize
from ckptzoo.datasets.batch_shapes import loader_shapes, pipeline_bound
from ckptzoo.memory.measure.step import worst_case_shape

EPOCHS = 30
SEED = 3
# landscape, portrait, wide (the crowded third image), square, portrait
SHAPES = [(48, 80), (80, 48), (40, 112), (64, 64), (72, 56)]


@pytest.fixture(scope='module')
def coco_root(tmp_path_factory):
    return generate_coco(str(tmp_path_factory.mktemp('shapes') / 'coco'), num_train=11,
                         num_val=0, img_shapes=SHAPES, crowded_objects=20,
                         crowded_obj_size=(6, 10))


def _pipeline(resize, pad=dict(size_divisor=8)):
    return [dict(type='LoadImageFromFile'), dict(type='LoadAnnotations', with_bbox=True),
            dict(type='Resize', **resize), dict(type='RandomFlip', flip_ratio=0.5),
            dict(type='Normalize', mean=[0, 0, 0], std=[1, 1, 1], to_rgb=True)] + \
        ([dict(type='Pad', **pad)] if pad else []) + \
        [dict(type='DefaultFormatBundle'), dict(type='Collect', keys=['img', 'gt_bboxes',
                                                                     'gt_labels'])]


def _cfg(root, pipeline, repeat=None):
    train = dict(type='CocoDataset', ann_file=osp.join(root, 'annotations',
                                                       'instances_train2017.json'),
                 img_prefix=osp.join(root, 'train2017'), pipeline=pipeline,
                 classes=('circle', 'square', 'triangle'))
    if repeat:
        train = dict(type='RepeatDataset', times=repeat, dataset=train)
    return Config(dict(data=dict(train=train), seed=SEED))


def _run_loader(dataset, spg, epochs=EPOCHS):
    """Per group (the flag of the batch's images): the batch shapes seen, and the largest
    gt count of an image and of a batch."""
    loader = build_dataloader(dataset, spg, 0, seed=SEED)
    seen, boxes = {}, {}
    for epoch in range(epochs):
        loader.sampler.set_epoch(epoch)
        for batch in loader:
            flags = {int(m['ori_shape'][1] / m['ori_shape'][0] > 1) for m in batch['img_metas']}
            assert len(flags) == 1  # GroupSampler: one group per batch
            flag = flags.pop()
            seen.setdefault(flag, Counter())[tuple(batch['img'].shape[-2:])] += 1
            counts = [len(b) for b in batch['gt_bboxes']]
            per_image, per_batch = boxes.get(flag, (0, 0))
            boxes[flag] = max(per_image, max(counts)), max(per_batch, sum(counts))
    return seen, boxes


RESIZES = {
    'one scale': dict(img_scale=(100, 60), keep_ratio=True),
    'range': dict(img_scale=[(100, 60), (70, 40)], multiscale_mode='range', keep_ratio=True),
    'ratio_range': dict(img_scale=(80, 50), ratio_range=(0.8, 1.2), keep_ratio=True),
    'value, no keep_ratio': dict(img_scale=[(96, 48), (64, 80)], multiscale_mode='value',
                                 keep_ratio=False),
}


@pytest.mark.parametrize('name,spg,repeat', [('one scale', 2, None), ('range', 2, None),
                                             ('ratio_range', 2, None),
                                             ('value, no keep_ratio', 2, None),
                                             ('one scale', 1, None), ('range', 1, None),
                                             ('one scale', 2, 2)])
def test_shapes_and_boxes_are_the_loaders(coco_root, name, spg, repeat):
    cfg = _cfg(coco_root, _pipeline(RESIZES[name]), repeat)
    dataset = build_dataset(cfg.data.train)
    seen, boxes = _run_loader(dataset, spg)
    state = np.random.get_state()[1].copy()
    shapes = loader_shapes(cfg, dataset, spg, epochs=EPOCHS)
    assert (np.random.get_state()[1] == state).all()  # the replayed draws left it as it was
    assert shapes.from_data and shapes.note is None and shapes.epochs == EPOCHS
    assert sorted(g.flag for g in shapes.groups) == sorted(seen) == [0, 1]
    total = sum(sum(c.values()) for c in seen.values())
    random = name != 'one scale'
    for group in shapes.groups:
        got = seen[group.flag]
        n = sum(got.values())
        # the simulated epochs are the loader's: the same shapes, as often
        assert {s: f for s, f in group.shapes if f > 0} == pytest.approx(
            {s: c / n for s, c in got.items()})
        assert group.weight == pytest.approx(n / total)
        assert sum(f for _, f in group.shapes) == pytest.approx(1)
        # the worst dominates every batch; it is the largest seen when nothing is random
        assert all(h <= group.worst[0] and w <= group.worst[1] for h, w in got)
        largest = (max(h for h, _ in got), max(w for _, w in got))
        if not random:
            assert group.worst == largest
            if spg == 2:  # two images of the group make it: one tall, one wide
                assert group.worst in got
        assert (group.max_boxes_per_image, group.max_boxes_per_batch) == boxes[group.flag]
    assert shapes.worst == (max(g.worst[0] for g in shapes.groups),
                            max(g.worst[1] for g in shapes.groups))
    assert {s for s, _ in shapes.candidates} >= {s for c in seen.values() for s in c}
    assert sum(w for _, w in shapes.candidates) == pytest.approx(1)
    assert shapes.max_boxes_per_image == 20
    if spg == 1:
        assert shapes.max_boxes_per_batch == 20
    else:  # the crowded image can meet itself: its group of 5 is padded with a repeat
        crowded = next(g for g in shapes.groups if g.max_boxes_per_image == 20)
        assert crowded.num_images % 2 == 1 or repeat  # (or RepeatDataset lists it twice)
        assert shapes.max_boxes_per_batch == 40


def test_parts_with_their_own_pipelines(coco_root):
    """A RepeatDataset of a list (a ConcatDataset) whose parts resize differently."""
    one, other = (_cfg(coco_root, _pipeline(RESIZES[name])).data.train
                  for name in ('one scale', 'value, no keep_ratio'))
    cfg = Config(dict(data=dict(train=dict(type='RepeatDataset', times=2,
                                           dataset=[one, other])), seed=SEED))
    dataset = build_dataset(cfg.data.train)
    seen, boxes = _run_loader(dataset, 2, epochs=10)
    shapes = loader_shapes(cfg, dataset, 2, epochs=10)
    assert shapes.from_data
    for group in shapes.groups:
        got = seen[group.flag]
        assert {s: f for s, f in group.shapes if f > 0} == pytest.approx(
            {s: c / sum(got.values()) for s, c in got.items()})
        assert all(h <= group.worst[0] and w <= group.worst[1] for h, w in got)
        assert group.max_boxes_per_image == boxes[group.flag][0]
    assert pipeline_bound(cfg) == (104, 104)  # the first part's pipeline


@pytest.mark.parametrize('name', ['range', 'ratio_range', 'value, no keep_ratio'])
def test_worst_is_reached_at_the_largest_draw(coco_root, monkeypatch, name):
    cfg = _cfg(coco_root, _pipeline(RESIZES[name]))
    dataset = build_dataset(cfg.data.train)
    worst = {g.flag: g.worst for g in loader_shapes(cfg, dataset, 2, epochs=2).groups}
    monkeypatch.setattr(Resize, 'random_sample', staticmethod(
        lambda scales: ((max(max(s) for s in scales), max(min(s) for s in scales)), None)))
    # ratio_range: the largest ratio, drawn at the largest random_sample() (just below 1)
    monkeypatch.setattr(np.random, 'random_sample', lambda: np.nextafter(1.0, 0.0))
    if name == 'value, no keep_ratio':  # the tallest scale for one image, the widest for another
        picks = iter(range(10 ** 6))
        monkeypatch.setattr(Resize, 'random_select', staticmethod(
            lambda scales: (scales[next(picks) % 2], None)))
    seen, _ = _run_loader(dataset, 2, epochs=EPOCHS)
    for flag, got in seen.items():
        assert worst[flag] in got


def test_sizes_from_file_headers_and_the_fallback(coco_root, tmp_path):
    cfg = _cfg(coco_root, _pipeline(RESIZES['one scale']))
    dataset = build_dataset(cfg.data.train)
    expected = loader_shapes(cfg, dataset, 2, epochs=3)
    anns = [dataset.get_ann_info(i) for i in range(len(dataset))]
    dataset.get_ann_info = anns.__getitem__  # a dataset that reads boxes without the sizes
    for info in dataset.data_infos:  # no sizes: the image headers give them
        del info['height'], info['width']
    assert loader_shapes(cfg, dataset, 2, epochs=3) == expected
    dataset.img_prefix = str(tmp_path / 'missing')  # and no files: the bound, said so
    shapes = loader_shapes(cfg, dataset, 2, epochs=3)
    assert not shapes.from_data and shapes.worst == pipeline_bound(cfg) == (104, 104)
    # GroupSampler batches each orientation apart: its bound, never 104x104
    landscape, portrait = pipeline_bound(cfg, 'landscape'), pipeline_bound(cfg, 'portrait')
    assert landscape[1] == portrait[0] == 104 and landscape == portrait[::-1]
    assert shapes.note.startswith('Image sizes are unknown') and 'of each orientation' in \
        shapes.note
    flags = dataset.flag.tolist()
    assert {g.flag: g.worst for g in shapes.groups} == {
        f: landscape if f == 1 else portrait for f in set(flags)}
    assert {s for s, _ in shapes.candidates} == {g.worst for g in shapes.groups}
    assert sum(w for _, w in shapes.candidates) == pytest.approx(1.0)
    assert shapes.max_boxes_per_image == expected.max_boxes_per_image  # boxes are still known
    no_resize = _cfg(coco_root, [dict(type='LoadImageFromFile'), dict(type='Pad', size_divisor=8)])
    shapes = loader_shapes(no_resize, dataset, 2, epochs=1)
    assert shapes.groups == [] and shapes.worst is None and 'no batch shape' in shapes.note


class MinIoURandomCrop:
    """A user's crop: its output size is not modelled."""

    def __call__(self, results):
        return results


def test_unknown_geometric_transform_falls_back_naming_it(coco_root):
    cfg = _cfg(coco_root, _pipeline(RESIZES['one scale']))
    dataset = build_dataset(cfg.data.train)
    dataset.pipeline.transforms.insert(3, MinIoURandomCrop())  # the dataset's own pipeline
    shapes = loader_shapes(cfg, dataset, 2)
    assert not shapes.from_data and 'MinIoURandomCrop' in shapes.note
    assert shapes.worst == (104, 104)


@pytest.mark.parametrize('shuffle', [False, True])
def test_ungrouped_batches_any_images_share(coco_root, shuffle):
    """In order (fixed runs of images), or shuffled without a group flag: one group."""
    cfg = _cfg(coco_root, _pipeline(RESIZES['range']))
    dataset = build_dataset(cfg.data.train)
    if shuffle:
        del dataset.flag  # build_dataloader then shuffles with a DistributedSampler
    shapes = loader_shapes(cfg, dataset, 3, shuffle=shuffle, epochs=4)
    loader = build_dataloader(dataset, 3, 0, shuffle=shuffle, seed=SEED)
    got, boxes = Counter(), 0
    for epoch in range(4):
        loader.sampler.set_epoch(epoch)
        for batch in loader:
            got[tuple(batch['img'].shape[-2:])] += 1
            boxes = max(boxes, sum(len(x) for x in batch['gt_bboxes']))
    (group,) = shapes.groups
    assert group.flag is None and group.num_images == len(dataset) and shapes.note is None
    assert {s: f for s, f in group.shapes if f} == pytest.approx(
        {s: c / sum(got.values()) for s, c in got.items()})
    if shuffle:  # three distinct images: the crowded one (20) and two of 2 at most
        assert boxes <= group.max_boxes_per_batch == 24
    else:  # the fixed runs' largest
        assert group.max_boxes_per_batch == boxes
    json.dumps(shapes.to_dict())  # plain data for a plan file


def test_pipeline_bound_is_the_old_name_and_scales_by_the_ratio():
    pipeline = [dict(type='Resize', img_scale=(100, 60), ratio_range=(0.5, 1.5)),
                dict(type='Pad', size_divisor=32)]
    cfg = Config(dict(data=dict(train=dict(pipeline=pipeline))))
    assert pipeline_bound(cfg) == worst_case_shape(cfg) == (160, 160)
    with pytest.raises(ValueError, match='samples_per_gpu'):
        loader_shapes(cfg, [], 0)


def _detr_pipeline(k=1):
    """mmdet's DETR training pipeline (``detr_r50_8x2_150e_coco.py``), its sizes divided by
    ``k``: a flip, then AutoAugment's multi-scale Resize or Resize -> RandomCrop ->
    Resize(override=True)."""
    long = 1333 // k
    scales = [(s // k, long) for s in range(480, 801, 32)]
    return [dict(type='LoadImageFromFile'), dict(type='LoadAnnotations', with_bbox=True),
            dict(type='RandomFlip', flip_ratio=0.5),
            dict(type='AutoAugment', policies=[
                [dict(type='Resize', img_scale=scales, multiscale_mode='value', keep_ratio=True)],
                [dict(type='Resize', img_scale=[(s // k, long) for s in (400, 500, 600)],
                      multiscale_mode='value', keep_ratio=True),
                 dict(type='RandomCrop', crop_type='absolute_range',
                      crop_size=(384 // k, 600 // k), allow_negative_crop=True),
                 dict(type='Resize', img_scale=scales, multiscale_mode='value', override=True,
                      keep_ratio=True)]]),
            dict(type='Normalize', mean=[0, 0, 0], std=[1, 1, 1], to_rgb=True),
            dict(type='Pad', size_divisor=1), dict(type='DefaultFormatBundle'),
            dict(type='Collect', keys=['img', 'gt_bboxes', 'gt_labels'])]


def test_detr_auto_augment_is_simulated_draw_for_draw(coco_root):
    """DETR's AutoAugment (a policy drawn, then its Resize, RandomCrop with
    ``allow_negative_crop``, Resize(override=True)) is replayed as the loader draws it: the
    simulated epochs give the loader's batch shapes, as often; ``worst`` dominates them and
    stays within the config's bound (the largest over the policies)."""
    cfg = _cfg(coco_root, _detr_pipeline())
    assert pipeline_bound(cfg) == (1333, 1333)
    assert pipeline_bound(cfg, 'landscape') == pipeline_bound(cfg, 'portrait') == (1333, 1333)
    small = _cfg(coco_root, _detr_pipeline(10))
    dataset = build_dataset(small.data.train)
    epochs = 8
    seen, boxes = _run_loader(dataset, 2, epochs=epochs)
    shapes = loader_shapes(small, dataset, 2, epochs=epochs)
    assert shapes.from_data and shapes.note is None
    for group in shapes.groups:
        got = seen[group.flag]
        n = sum(got.values())
        assert {s: f for s, f in group.shapes if f > 0} == pytest.approx(
            {s: c / n for s, c in got.items()})
        assert all(h <= group.worst[0] and w <= group.worst[1] for h, w in got)
        assert group.worst[0] <= 133 and group.worst[1] <= 133
    assert len({s for c in seen.values() for s in c}) > 4  # the draws do vary the shapes


def test_unmodelled_crops_fall_back_to_the_bound_naming_them(coco_root):
    """A crop that may refuse (``allow_negative_crop=False``: the retry depends on where the
    boxes lie) is not simulated: the bound, and a note naming the transform."""
    pipeline = _detr_pipeline(10)
    pipeline[3]['policies'][1][1]['allow_negative_crop'] = False
    cfg = _cfg(coco_root, pipeline)
    shapes = loader_shapes(cfg, build_dataset(cfg.data.train), 2)
    assert not shapes.from_data and 'RandomCrop' in shapes.note
    assert shapes.worst == (133, 133)
    # a crop after a Resize of continuous scales, then a keep-ratio Resize: no corner is
    # known to be its worst case
    pipeline = _detr_pipeline(10)
    pipeline[3]['policies'][1][0] = dict(type='Resize', img_scale=(60, 133),
                                         ratio_range=(0.5, 1.0))
    cfg = _cfg(coco_root, pipeline)
    shapes = loader_shapes(cfg, build_dataset(cfg.data.train), 2)
    assert not shapes.from_data and 'Resize' in shapes.note and shapes.worst == (133, 133)


@pytest.mark.parametrize('crop, before, expected', [
    (dict(crop_size=(30, 50)), None, (30, 50)),
    (dict(crop_size=(30, 50)), (40, 40), (30, 40)),
    (dict(crop_size=(30, 50), crop_type='absolute_range'), None, (50, 50)),
    (dict(crop_size=(30, 50), crop_type='absolute_range'), (40, 60), (40, 50)),
    (dict(crop_size=(0.5, 0.5), crop_type='relative'), (40, 60), (40, 60)),
    (dict(crop_size=(0.5, 0.5), crop_type='relative_range'), None, None),
])
def test_pipeline_bound_of_random_crop(crop, before, expected):
    pipeline = [dict(type='Resize', img_scale=(before[1], before[0]), keep_ratio=False)] \
        if before else []
    pipeline.append(dict(type='RandomCrop', **crop))
    cfg = Config(dict(data=dict(train=dict(pipeline=pipeline))))
    assert pipeline_bound(cfg) == expected


def test_detr_worst_is_the_largest_reachable_shape():
    """``largest`` enumerates the scales and the corners of the crop's size range: it equals
    the brute-force largest over every scale and every crop size the pipeline can draw."""
    from ckptzoo.datasets.pipeline_geometry import _Geometry, _padded, _resized
    from ckptzoo.registry import build_transform
    pipeline = _detr_pipeline(10)
    geometry = _Geometry(pipeline)
    assert geometry.unknown is None and geometry.random
    policies = pipeline[3]['policies']
    scales, first = policies[0][0]['img_scale'], policies[1][0]['img_scale']
    pad = build_transform(dict(type='Pad', size_divisor=1))
    rng = np.random.default_rng(0)
    for _ in range(20):
        hw = (int(rng.integers(10, 300)), int(rng.integers(10, 300)))
        outs = {_resized(hw, s, True) for s in scales}
        for s in first:
            h, w = _resized(hw, s, True)
            outs |= {_padded(_resized((ch, cw), s2, True), pad)
                     for ch in range(min(h, 38), min(h, 60) + 1)
                     for cw in range(min(w, 38), min(w, 60) + 1) for s2 in scales}
        assert geometry.largest(hw) == (max(o[0] for o in outs), max(o[1] for o in outs))
        for seed in range(5):
            np.random.seed(seed)
            assert geometry.sample(None, hw) in outs


def test_auto_augment_steps_keep_the_size_and_their_draws_are_replayed():
    """Policies with AutoAugment's photometric and geometric steps (they draw ``rand()``,
    and the geometric ones the sign when applied) are replayed draw for draw: each sample's
    simulated size is the one the pipeline gives, for many seeds."""
    from ckptzoo.datasets.pipelines import Compose
    from ckptzoo.datasets.pipeline_geometry import _Geometry
    scales = [(40, 100), (50, 100), (60, 100)]
    policies = [
        [dict(type='Translate', level=5, prob=0.5),
         dict(type='Resize', img_scale=scales, multiscale_mode='value')],
        [dict(type='ColorTransform', level=3, prob=0.6),
         dict(type='Rotate', level=4, prob=0.7),
         dict(type='Resize', img_scale=scales, multiscale_mode='value'),
         dict(type='RandomCrop', crop_type='absolute_range', crop_size=(20, 45),
              allow_negative_crop=True)],
        [dict(type='EqualizeTransform', prob=0.5), dict(type='Shear', level=3, prob=0.5),
         dict(type='Resize', img_scale=scales, multiscale_mode='value')]]
    pipeline = [dict(type='RandomFlip', flip_ratio=0.5),
                dict(type='AutoAugment', policies=policies), dict(type='Pad', size_divisor=8)]
    geometry = _Geometry(pipeline)
    assert geometry.unknown is None and geometry.random
    transforms = Compose(pipeline)
    seen = set()
    for seed in range(60):
        h, w = 30 + seed % 17, 70 - seed % 23
        np.random.seed(seed)
        expected = geometry.sample(None, (h, w))
        img = (np.arange(h * w * 3).reshape(h, w, 3) % 251).astype(np.uint8)
        np.random.seed(seed)
        out = transforms(dict(img=img, img_shape=img.shape, gt_bboxes=np.zeros((0, 4), np.float32),
                              bbox_fields=['gt_bboxes'], img_fields=['img']))
        assert out['img'].shape[:2] == expected
        assert all(a <= b for a, b in zip(expected, geometry.largest((h, w))))
        seen.add(expected)
    assert len(seen) > 5
