"""Deterministic detections for evaluation tests: each ground-truth box kept with probability
0.8 and jittered, plus up to ``n_extra`` random boxes per class, random scores. The reference
numbers in the dataset tests were computed by mmdet 2.28.2 on exactly these."""
import numpy as np


def fake_results(anns, num_classes, seed=0, n_extra=2, span=60):
    rng = np.random.default_rng(seed)
    out = []
    for ann in anns:
        per = []
        for c in range(num_classes):
            dets = []
            for b, label in zip(ann['bboxes'], ann['labels']):
                if label == c and rng.random() < 0.8:
                    dets.append(list(np.asarray(b) + rng.normal(0, 2, 4)) + [rng.random()])
            for _ in range(rng.integers(0, n_extra + 1)):
                x, y = rng.uniform(0, span, 2)
                w, h = rng.uniform(5, 30, 2)
                dets.append([x, y, x + w, y + h, rng.random()])
            per.append(np.array(dets, dtype=np.float32).reshape(-1, 5))
        out.append(per)
    return out


def with_box_masks(data_infos, results):
    """``(bbox, segm)`` results: each detection's mask the filled box, as COCO RLE."""
    import pycocotools.mask as mask_utils
    out = []
    for info, per_class in zip(data_infos, results):
        h, w = info['height'], info['width']
        segms = []
        for dets in per_class:
            masks = []
            for b in dets:
                m = np.zeros((h, w), np.uint8, order='F')
                x1, y1, x2, y2 = np.clip(b[:4], 0, [w, h, w, h]).astype(int)
                m[y1:y2 + 1, x1:x2 + 1] = 1
                masks.append(mask_utils.encode(np.asfortranarray(m)))
            segms.append(masks)
        out.append((per_class, segms))
    return out
