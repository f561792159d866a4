import os.path as osp

import cv2
import numpy as np
import pytest

from ckptzoo.datasets import (ConcatDataset, RepeatDataset, VOCDataset, build_dataloader,
                              build_dataset)

CLASSES = ('cat', 'dog', 'person')


def _obj(name, box, difficult=None, truncated=None):
    d = '' if difficult is None else f'<difficult>{difficult}</difficult>'
    t = '' if truncated is None else f'<truncated>{truncated}</truncated>'
    coords = ''.join(f'<{k}>{v}</{k}>' for k, v in zip(('xmin', 'ymin', 'xmax', 'ymax'), box))
    return f'<object><name>{name}</name>{t}{d}<bndbox>{coords}</bndbox></object>'


def _xml(objs, size=(100, 80)):
    s = '' if size is None else \
        f'<size><width>{size[0]}</width><height>{size[1]}</height><depth>3</depth></size>'
    return f'<annotation><filename>x.jpg</filename>{s}{"".join(objs)}</annotation>'


def _write_voc(root, year, items, split='trainval'):
    """items: {img_id: (xml_text, (h, w) or None)}; writes images where a size is given."""
    base = osp.join(root, year)
    for sub in ('Annotations', 'JPEGImages', 'ImageSets/Main'):
        (root / year / sub).mkdir(parents=True, exist_ok=True)
    for img_id, (xml, hw) in items.items():
        (root / year / 'Annotations' / f'{img_id}.xml').write_text(xml)
        if hw is not None:
            cv2.imwrite(osp.join(base, 'JPEGImages', f'{img_id}.jpg'),
                        np.full(hw + (3,), 128, np.uint8))
    (root / year / 'ImageSets' / 'Main' / f'{split}.txt').write_text(
        '\n'.join(items) + '\n')
    return base + '/', osp.join(base, 'ImageSets', 'Main', f'{split}.txt')


@pytest.fixture
def voc(tmp_path):
    items = {
        'a': (_xml([_obj('dog', (11, 21, 51, 61), difficult=0, truncated=0),
                    _obj('cat', (5, 5, 40, 40), difficult=1),
                    _obj('person', ('10.7', '20.2', '60.9', '70.5'), truncated=1)]), None),
        # no <size> (read from the image: w=64, h=48), no <difficult>, no <truncated>
        'b': (_xml([_obj('cat', (1, 1, 10, 10))], size=None), (48, 64)),
        # only an unknown class: dropped in training when filter_empty_gt
        'c': (_xml([_obj('horse', (1, 1, 10, 10))]), None),
        # too small (short side 20 < 32): dropped in training
        'd': (_xml([_obj('dog', (1, 1, 10, 10))], size=(50, 20)), None),
    }
    prefix, ann = _write_voc(tmp_path, 'VOC2007', items)
    return prefix, ann


def _ds(prefix, ann, **kw):
    kw.setdefault('pipeline', [])
    return VOCDataset(ann_file=ann, img_prefix=prefix, classes=CLASSES, **kw)


def test_parse_edge_cases(voc):
    ds = _ds(*voc, test_mode=True)
    assert [i['id'] for i in ds.data_infos] == ['a', 'b', 'c', 'd']
    assert ds.year == 2007
    info_b = ds.data_infos[1]
    assert (info_b['width'], info_b['height']) == (64, 48)  # read from the image
    assert info_b['filename'] == osp.join('JPEGImages', 'b.jpg')

    ann = ds.get_ann_info(0)
    # mmdet 2.x: int(float(text)) - 1 on all four coordinates
    np.testing.assert_array_equal(ann['bboxes'], [[10, 20, 50, 60], [9, 19, 59, 69]])
    assert ann['bboxes'].dtype == np.float32
    np.testing.assert_array_equal(ann['labels'], [1, 2])
    assert ann['labels'].dtype == np.int64
    np.testing.assert_array_equal(ann['bboxes_ignore'], [[4, 4, 39, 39]])  # difficult
    np.testing.assert_array_equal(ann['labels_ignore'], [0])
    np.testing.assert_array_equal(ann['truncated'], [0, 1])

    ann_b = ds.get_ann_info(1)
    np.testing.assert_array_equal(ann_b['bboxes'], [[0, 0, 9, 9]])  # no <difficult> -> 0
    assert ann_b['bboxes_ignore'].shape == (0, 4)
    ann_c = ds.get_ann_info(2)
    assert ann_c['bboxes'].shape == (0, 4) and ann_c['labels'].shape == (0,)


def test_train_filtering_and_group_flag(voc):
    ds = _ds(*voc)
    # c: no known class, d: short side 20 < 32
    assert [i['id'] for i in ds.data_infos] == ['a', 'b']
    np.testing.assert_array_equal(ds.flag, [1, 1])  # 100x80 and 64x48 are wider than tall
    ds = _ds(*voc, filter_empty_gt=False)
    assert [i['id'] for i in ds.data_infos] == ['a', 'b', 'c']


def test_min_size_ignores_small_boxes(voc):
    ds = _ds(*voc, min_size=45)
    ann = ds.get_ann_info(0)
    # dog box 40x40 < 45 -> ignored; person 50x50 kept
    np.testing.assert_array_equal(ann['bboxes'], [[9, 19, 59, 69]])
    np.testing.assert_array_equal(ann['labels_ignore'], [1, 0])  # XML order: dog, cat


def test_malformed_xml_names_file(tmp_path):
    prefix, ann = _write_voc(tmp_path, 'VOC2007', {'bad': ('<annotation><size>', None)})
    with pytest.raises(ValueError, match=r'bad\.xml'):
        _ds(prefix, ann, test_mode=True)
    prefix, ann = _write_voc(tmp_path, 'VOC2012',
                             {'nocoord': (_xml([_obj('cat', (1, 'x', 3, 4))]), None)})
    ds = _ds(prefix, ann, test_mode=True)
    with pytest.raises(ValueError, match=r'nocoord\.xml.*ymin'):
        ds.get_ann_info(0)


def test_boxes_touching_the_border_are_valid(tmp_path):
    """VOC's 1-based indices: xmax == width is the last column; one pixel beyond each edge is
    tolerated (0-based / end-exclusive exports); the box is kept as mmdet reads it."""
    prefix, ann = _write_voc(tmp_path, 'VOC2007', {'edge': (_xml([
        _obj('cat', (1, 1, 100, 80)), _obj('dog', (0, 0, 101, 81)),
        _obj('horse', (-50, 5, 500, 6))]), None)})  # a class not in CLASSES: not read
    ds = _ds(prefix, ann)
    np.testing.assert_array_equal(ds.get_ann_info(0)['bboxes'],
                                  [[0, 0, 99, 79], [-1, -1, 100, 80]])


@pytest.mark.parametrize('box, why', [
    ((20, 10, 20, 30), 'xmax <= xmin'),                 # zero area
    ((30, 10, 20, 30), 'xmax <= xmin'),                 # swapped corners
    (('20.2', 10, '20.9', 30), 'xmax <= xmin'),         # int(float()) as mmdet: 20 == 20
    ((10, 30, 20, 30), 'ymax <= ymin'),
    ((10, -3, 20, 30), 'a negative coordinate'),
    ((10, 10, 102, 30), 'xmax beyond the width 100'),
    ((10, 10, 20, 90), 'ymax beyond the height 80'),
])
def test_bad_box_names_the_file_object_and_box(tmp_path, box, why):
    prefix, ann = _write_voc(tmp_path, 'VOC2007', {'bad': (_xml([
        _obj('cat', (1, 1, 10, 10)), _obj('dog', box, difficult=1)]), None)})
    xml = osp.join(prefix, 'Annotations', 'bad.xml')
    for test_mode in (False, True):
        with pytest.raises(ValueError) as err:
            _ds(prefix, ann, test_mode=test_mode)
        msg = str(err.value)
        assert msg.startswith(f"annotation XML {xml!r}: object 1 ('dog') has the box "
                              f"(xmin, ymin, xmax, ymax) = {tuple(int(float(v)) for v in box)}: "
                              f"{why}")
        assert '1 <= xmin < xmax <= width and 1 <= ymin < ymax <= height' in msg


def test_zero_image_size_in_xml_is_an_error(tmp_path):
    prefix, ann = _write_voc(tmp_path, 'VOC2007', {'nosize': (_xml(
        [_obj('cat', (1, 1, 10, 10))], size=(0, 0)), None)})
    with pytest.raises(ValueError, match=r'nosize\.xml.*<size> gives a 0x0 image'):
        _ds(prefix, ann)


def test_empty_image_list_is_an_error_naming_the_file(tmp_path):
    prefix, ann = _write_voc(tmp_path, 'VOC2007', {})  # an empty ImageSets/Main/trainval.txt
    for test_mode in (False, True):
        with pytest.raises(ValueError, match=f"VOCDataset: the annotation file '{ann}' lists "
                                             f"no images"):
            _ds(prefix, ann, test_mode=test_mode)


def test_every_image_filtered_out_is_an_error_saying_why(tmp_path):
    prefix, ann = _write_voc(tmp_path, 'VOC2007', {
        'horse': (_xml([_obj('horse', (1, 1, 10, 10))]), None),      # no object of CLASSES
        'tiny': (_xml([_obj('dog', (1, 1, 10, 10))], size=(50, 20)), None)})  # 20 px < 32
    ds = build_dataset(dict(type='RepeatDataset', times=2, dataset=dict(
        type='VOCDataset', ann_file=ann, img_prefix=prefix, classes=CLASSES, pipeline=[])))
    assert len(ds) == 0  # empty, as mmdet; the loader (before training) says why
    with pytest.raises(ValueError) as err:
        build_dataloader(ds, samples_per_gpu=2, workers_per_gpu=0, seed=0)
    assert str(err.value) == (
        f"VOCDataset: all 2 images of '{ann}' are filtered out for training: 1 have a short "
        f"side below 32 px; 1 have no object of the classes ('cat', 'dog', 'person') and "
        f"filter_empty_gt=True drops them. Check the classes and the annotations, or set "
        f"filter_empty_gt=False to keep images without objects")
    assert len(_ds(prefix, ann, filter_empty_gt=False)) == 1  # the 100x80 one


def test_year_and_classes(tmp_path, voc):
    prefix, ann = _write_voc(tmp_path / 'x', 'VOC2012', {'a': (_xml([]), None)})
    assert _ds(prefix, ann, test_mode=True).year == 2012
    prefix, ann = _write_voc(tmp_path / 'y', 'mydata', {'a': (_xml([]), None)})
    with pytest.raises(ValueError, match='VOC2007 nor VOC2012'):
        _ds(prefix, ann, test_mode=True)
    ds = VOCDataset(ann_file=voc[1], img_prefix=voc[0], pipeline=[], test_mode=True)
    assert len(ds.CLASSES) == 20 and ds.CLASSES[11] == 'dog'
    assert ds.get_ann_info(0)['labels'].tolist() == [11, 14]


def test_list_ann_file_is_concatenated(tmp_path):
    p07, a07 = _write_voc(tmp_path, 'VOC2007', {
        'x1': (_xml([_obj('cat', (1, 1, 40, 40))]), None),
        'x2': (_xml([_obj('dog', (1, 1, 40, 40))], size=(60, 90)), None)})
    p12, a12 = _write_voc(tmp_path, 'VOC2012', {
        'y1': (_xml([_obj('person', (2, 2, 41, 41))]), None)})
    cfg = dict(type='RepeatDataset', times=2,
               dataset=dict(type='VOCDataset', ann_file=[a07, a12], img_prefix=[p07, p12],
                            classes=CLASSES, pipeline=[]))
    ds = build_dataset(cfg)
    assert isinstance(ds, RepeatDataset) and isinstance(ds.dataset, ConcatDataset)
    assert len(ds) == 6
    assert [d.year for d in ds.dataset.datasets] == [2007, 2012]
    np.testing.assert_array_equal(ds.flag, [1, 0, 1, 1, 0, 1])
    assert [ds.get_ann_info(i)['labels'].tolist() for i in range(6)] == [[0], [1], [2]] * 2
    np.testing.assert_array_equal(ds.get_ann_info(2)['bboxes'], [[1, 1, 40, 40]])
    # the class itself takes one file: the error says how to build lists
    with pytest.raises(TypeError, match='build_dataset'):
        VOCDataset(ann_file=[a07, a12], img_prefix=[p07, p12], classes=CLASSES, pipeline=[])
    # mismatched prefix list
    with pytest.raises(ValueError, match='img_prefix has 1 entries'):
        build_dataset(dict(type='VOCDataset', ann_file=[a07, a12], img_prefix=[p07],
                           classes=CLASSES, pipeline=[]))


def test_data_root_joining(tmp_path, voc):
    ds = VOCDataset(ann_file=osp.relpath(voc[1], str(tmp_path)), img_prefix='VOC2007/',
                    data_root=str(tmp_path), classes=CLASSES, pipeline=[], test_mode=True)
    assert ds.img_prefix == osp.join(str(tmp_path), 'VOC2007/') and len(ds) == 4


def test_getitem_retries_when_pipeline_returns_none(voc):
    seen = []

    def reject_a(results):
        seen.append(results['img_info']['id'])
        return None if results['img_info']['id'] == 'a' else results

    ds = _ds(*voc, pipeline=[reject_a])
    np.random.seed(0)
    out = ds[0]
    assert out['img_info']['id'] == 'b' and seen[0] == 'a'
    assert out['ann_info']['labels'].tolist() == [0]
    assert out['bbox_fields'] == [] and out['img_prefix'] == voc[0]


def _perfect(ds):
    res = []
    for i in range(len(ds)):
        ann = ds.get_ann_info(i)
        res.append([np.hstack([ann['bboxes'][ann['labels'] == c],
                               np.ones((np.sum(ann['labels'] == c), 1), np.float32)])
                    for c in range(len(ds.CLASSES))])
    return res


def test_evaluate(voc):
    ds = _ds(*voc, test_mode=True)
    res = _perfect(ds)
    out = ds.evaluate(res, logger='silent')
    assert list(out) == ['mAP', 'AP50'] and out['mAP'] == pytest.approx(1.0)
    # a detection on the difficult cat is ignored: still perfect
    res[0][0] = np.array([[4, 4, 39, 39, 0.9]], np.float32)
    assert ds.evaluate(res, logger='silent')['mAP'] == pytest.approx(1.0)
    # drop the person detection: person AP 0 -> mean of (1, 1, 0)
    res[0][2] = np.zeros((0, 5), np.float32)
    assert ds.evaluate(res, logger='silent')['mAP'] == pytest.approx(2 / 3)
    out = ds.evaluate(res, iou_thr=[0.5, 0.75], logger='silent')
    assert list(out) == ['mAP', 'AP50', 'AP75']
    with pytest.raises(KeyError, match='bbox'):
        ds.evaluate(res, metric='bbox')


def test_eval_mode_follows_year(tmp_path):
    # one class, 2 gts; detections: TP (0.9), FP (0.8), TP (0.7)
    # -> recall .5,.5,1; precision 1,.5,2/3: area = .5 + .5 * 2/3; 11pt = (6 + 5 * 2/3) / 11
    objs = [_obj('cat', (1, 1, 40, 40)), _obj('cat', (51, 41, 90, 70))]
    res = [[np.array([[0, 0, 39, 39, .9], [60, 5, 90, 30, .8], [50, 40, 89, 69, .7]],
                     np.float32), np.zeros((0, 5), np.float32), np.zeros((0, 5), np.float32)]]
    for year, expected in (('VOC2007', (6 + 5 * 2 / 3) / 11), ('VOC2012', .5 + .5 * 2 / 3)):
        prefix, ann = _write_voc(tmp_path, year, {'a': (_xml(objs), None)})
        ds = _ds(prefix, ann, test_mode=True)
        assert ds.evaluate(res, logger='silent')['mAP'] == pytest.approx(expected, abs=1e-6)


def test_concat_evaluate(tmp_path):
    p07, a07 = _write_voc(tmp_path, 'VOC2007', {'x1': (_xml([_obj('cat', (1, 1, 40, 40))]),
                                                       None)})
    p12, a12 = _write_voc(tmp_path, 'VOC2012', {'y1': (_xml([_obj('dog', (2, 2, 41, 41))]),
                                                       None)})
    cfg = dict(type='VOCDataset', ann_file=[a07, a12], img_prefix=[p07, p12],
               classes=CLASSES, pipeline=[], test_mode=True)
    ds = build_dataset(cfg)
    res = _perfect(ds)
    res[1][1] = np.zeros((0, 5), np.float32)  # miss the VOC2012 dog
    out = ds.evaluate(res, logger='silent')
    assert out['0_mAP'] == pytest.approx(1.0) and out['1_mAP'] == 0.0
    # joint: cat AP 1, dog AP 0; annotations read from each part's own img_prefix
    joint = build_dataset(dict(cfg, separate_eval=False))
    assert joint.evaluate(res, logger='silent')['mAP'] == pytest.approx(0.5)


def test_with_mask_on_voc_is_an_error_naming_the_dataset(voc):
    prefix, ann = voc
    with pytest.raises(ValueError, match=r"VOCDataset '.*trainval\.txt': VOC XML annotations "
                                         r"have no instance masks"):
        _ds(prefix, ann, pipeline=[dict(type='LoadAnnotations', with_mask=True)])
    _ds(prefix, ann, pipeline=[dict(type='LoadAnnotations')])  # boxes only: fine
