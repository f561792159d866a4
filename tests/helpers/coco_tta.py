"""One synthetic COCO image through mmdet 2.x's test pipeline with MultiScaleFlipAug (the view
and its mirror), collated: the input of a detector's test-time augmentation."""
import os.path as osp

from ckptzoo.datasets import CocoDataset, collate, generate_coco

IMG_NORM = dict(mean=[123.675, 116.28, 103.53], std=[58.395, 57.12, 57.375], to_rgb=True)
ORI_SHAPE = (40, 56)  # (h, w) of the image; the views are twice that


def flip_aug_batch(tmp_path):
    root = generate_coco(str(tmp_path / 'coco'), num_train=0, num_val=1,
                         img_shapes=[ORI_SHAPE])
    pipeline = [
        dict(type='LoadImageFromFile'),
        dict(type='MultiScaleFlipAug', img_scale=(112, 80), flip=True, transforms=[
            dict(type='Resize', keep_ratio=True), dict(type='RandomFlip'),
            dict(type='Normalize', **IMG_NORM), dict(type='Pad', size_divisor=32),
            dict(type='ImageToTensor', keys=['img']), dict(type='Collect', keys=['img'])])]
    dataset = CocoDataset(ann_file=osp.join(root, 'annotations', 'instances_val2017.json'),
                          img_prefix=osp.join(root, 'val2017'), pipeline=pipeline,
                          test_mode=True, classes=('circle', 'square', 'triangle'))
    return collate([dataset[0]])


def swapped_views(batch):
    """The same two views in the other order: the input ``flip_aug_batch`` would give for
    the mirror image (its view is the first one's mirror, and its mirror the first view)."""
    return dict(img=batch['img'][::-1], img_metas=batch['img_metas'])
