"""Print the whole config, ``_base_`` files merged and ``--cfg-options`` applied (mmdet 2.x)."""
import argparse
import os.path as osp
import sys

sys.path.insert(0, osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__)))))

from mmengine.config import Config  # noqa: E402
from ckptzoo.utils.dict_action import DictAction  # noqa: E402


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description='Print the whole config')
    parser.add_argument('config', help='config file path')
    parser.add_argument('--cfg-options', nargs='+', action=DictAction,
                        help='override config settings, as tools/train.py')
    parser.add_argument('--options', nargs='+', action=DictAction,
                        help='deprecated, use --cfg-options')
    args = parser.parse_args(argv)
    if args.options and args.cfg_options:
        parser.error('--options and --cfg-options cannot be both specified; --options is '
                     'deprecated in favor of --cfg-options')
    args.cfg_options = args.cfg_options or args.options
    return args


def main(argv=None):
    args = parse_args(argv)
    if not osp.isfile(args.config):
        sys.exit(f'print_config.py: error: config file not found: {args.config}')
    cfg = Config.fromfile(args.config)
    if args.cfg_options is not None:
        cfg.merge_from_dict(args.cfg_options)
    print(f'Config:\n{cfg.pretty_text}')
    return cfg


if __name__ == '__main__':
    main()
