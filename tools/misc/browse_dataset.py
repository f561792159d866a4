"""Draw the training pipeline's output with its ground-truth boxes (mmdet 2.x's command):
check annotations and augmentations before training.

    python tools/misc/browse_dataset.py CONFIG --output-dir DIR [--not-show]

The pipeline runs without ``DefaultFormatBundle``, ``Normalize`` and ``Collect``
(``--skip-type``), so each image is drawn as the network would see it, before normalisation.
"""
import argparse
import os
import os.path as osp
import sys

sys.path.insert(0, osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__)))))

from mmengine.config import Config  # noqa: E402
from ckptzoo.utils.dict_action import DictAction  # noqa: E402


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description='Browse a dataset')
    parser.add_argument('config', help='train config file path')
    parser.add_argument('--skip-type', type=str, nargs='+',
                        default=['DefaultFormatBundle', 'Normalize', 'Collect'],
                        help='pipeline steps to leave out')
    parser.add_argument('--output-dir', default=None, help='write the drawn images here')
    parser.add_argument('--not-show', default=False, action='store_true',
                        help='do not open a window (implied by --output-dir)')
    parser.add_argument('--show-interval', type=float, default=2,
                        help='seconds between shown images')
    parser.add_argument('--cfg-options', nargs='+', action=DictAction,
                        help='override config settings, as tools/train.py')
    args = parser.parse_args(argv)
    if args.output_dir is None and args.not_show:
        parser.error('nothing to do: give --output-dir, or drop --not-show')
    return args


def retrieve_data_cfg(config_path, skip_type, cfg_options):
    """The config with the training pipeline(s) stripped of the ``skip_type`` steps."""
    cfg = Config.fromfile(config_path)
    if cfg_options is not None:
        cfg.merge_from_dict(cfg_options)
    train = cfg.data.train
    while isinstance(train, dict) and 'dataset' in train:  # RepeatDataset and other wrappers
        train = train['dataset']
    for data_cfg in (train if isinstance(train, (list, tuple)) else [train]):
        data_cfg['pipeline'] = [step for step in data_cfg['pipeline']
                                if step['type'] not in skip_type]
    return cfg


def main(argv=None):
    args = parse_args(argv)
    from mmengine.utils import ProgressBar

    from ckptzoo.apis import prepare_synthetic_data
    from ckptzoo.datasets import build_dataset
    from ckptzoo.visualization import imshow_det_bboxes

    cfg = retrieve_data_cfg(args.config, args.skip_type, args.cfg_options)
    if args.output_dir is not None:
        os.makedirs(args.output_dir, exist_ok=True)
    prepare_synthetic_data(cfg)
    dataset = build_dataset(cfg.data.train)
    classes = getattr(dataset, 'CLASSES', None)
    palette = getattr(dataset, 'PALETTE', None)
    bar = ProgressBar(len(dataset))
    for i in range(len(dataset)):
        item = dataset[i]
        for key in ('img', 'gt_bboxes', 'gt_labels'):
            if key not in item:
                raise KeyError(f'the pipeline output has no {key!r} (keys: {sorted(item)}): '
                               f'add it to the pipeline or --skip-type the step that drops it')
        if not hasattr(item['img'], 'shape') or item['img'].ndim != 3:
            raise TypeError('the pipeline output img is not an HxWx3 image: --skip-type the '
                            'steps that turn it into a tensor (DefaultFormatBundle, '
                            'ImageToTensor)')
        out_file = None
        if args.output_dir is not None:
            out_file = osp.join(args.output_dir, osp.basename(item.get('filename') or
                                                              f'{i:06d}.png'))
        imshow_det_bboxes(item['img'].astype('uint8'), item['gt_bboxes'], item['gt_labels'],
                          class_names=classes, bbox_color=palette, text_color=None,
                          font_size=13,
                          show=args.output_dir is None and not args.not_show,
                          wait_time=args.show_interval, out_file=out_file)
        bar.update()


if __name__ == '__main__':
    main()
