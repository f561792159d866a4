"""A tiny WIDER Face in its converted Pascal VOC layout (what ``WIDERFaceDataset`` and mmdet's
``wider_face.py`` config read), generated: no download.

Layout::

    root/train.txt, root/val.txt                       image ids
    root/WIDER_train/Annotations/<id>.xml              folder, filename, size, objects 'face'
    root/WIDER_train/<folder>/<id>.jpg                 folders as WIDER's event folders
    root/WIDER_val/...

The faces are the coloured shapes of :mod:`ckptzoo.datasets.synthetic_voc` (one shape, named
``face``), 8-40 px so that some fall under the config's ``min_size=17``; every object has
``<difficult>0</difficult>``, as the converted annotations. The same arguments give
byte-identical files; generation is atomic and a repeat call with the same arguments is a no-op.

CLI: ``python -m ckptzoo.datasets.synthetic_wider_face ROOT [--num-train N] [--num-val N]``.
"""
import argparse
import os
import os.path as osp

import cv2
import numpy as np

from .synthetic_voc import _annotation_xml, _make_image, _range, _size_ranges, write_once

MARKER = '.ckptzoo_synthetic_wider_face_complete.json'
#: WIDER's event folders the images are spread over
FOLDERS = ('0--Parade', '1--Handshaking', '12--Group')


def generate_wider_face(root, num_train=6, num_val=4, img_size=((64, 96), (64, 96)), seed=0,
                        obj_size=(8, 40), max_objects=4):
    """Write the dataset into ``root`` unless it is already complete with the same arguments;
    return ``root``."""
    for name, n in (('num_train', num_train), ('num_val', num_val)):
        if not isinstance(n, int) or n < 0:
            raise ValueError(f'{name} must be a non-negative int, got {n!r}')
    h_range, w_range = _size_ranges(img_size)
    obj_size = _range(obj_size, 'obj_size')
    if not isinstance(max_objects, int) or max_objects < 1:
        raise ValueError(f'max_objects must be a positive int, got {max_objects!r}')
    params = dict(num_train=num_train, num_val=num_val, img_size=[list(h_range), list(w_range)],
                  seed=seed, obj_size=list(obj_size), max_objects=max_objects, version=1)
    root = osp.abspath(root)

    def write(tmp):
        rng = np.random.default_rng(seed)
        for split, n in (('train', num_train), ('val', num_val)):
            base = osp.join(tmp, f'WIDER_{split}')
            os.makedirs(osp.join(base, 'Annotations'))
            ids = []
            for i in range(n):
                folder = FOLDERS[i % len(FOLDERS)]
                event = folder.split('--', 1)
                img_id = f'{event[0]}_{event[1]}_{split}_{i}'
                img, objects = _make_image(rng, ('circle', ), h_range, w_range, obj_size,
                                           max_objects)
                for obj in objects:
                    obj['name'], obj['difficult'] = 'face', 0
                os.makedirs(osp.join(base, folder), exist_ok=True)
                ok, buf = cv2.imencode('.jpg', img, [cv2.IMWRITE_JPEG_QUALITY, 95])
                if not ok:
                    raise OSError(f'JPEG encoding failed for image {img_id}')
                buf.tofile(osp.join(base, folder, f'{img_id}.jpg'))
                with open(osp.join(base, 'Annotations', f'{img_id}.xml'), 'w',
                          encoding='utf-8') as f:
                    f.write(_annotation_xml(img_id, folder, img.shape[0], img.shape[1], objects))
                ids.append(img_id)
            with open(osp.join(tmp, f'{split}.txt'), 'w', encoding='utf-8') as f:
                f.write(''.join(f'{i}\n' for i in ids))

    write_once(root, params, MARKER, 'generate_wider_face', write)
    return root


def main(argv=None):
    parser = argparse.ArgumentParser(description='Write a tiny synthetic WIDER Face dataset.')
    parser.add_argument('root', help='writes ROOT/train.txt, ROOT/WIDER_train, ...')
    parser.add_argument('--num-train', type=int, default=6)
    parser.add_argument('--num-val', type=int, default=4)
    parser.add_argument('--seed', type=int, default=0)
    args = parser.parse_args(argv)
    print(f'synthetic WIDER Face ready at '
          f'{generate_wider_face(args.root, args.num_train, args.num_val, seed=args.seed)}')


if __name__ == '__main__':
    main()
