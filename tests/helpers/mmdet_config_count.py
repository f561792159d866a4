"""How much of mmdet 2.28.2's shipped config tree builds: every model config of the installed
wheel (``mmdet/.mim/configs``, read, never imported) built on the ``meta`` device, so no
weights are allocated or initialised. Kept out of the test run (it takes minutes);
``python -m tests.helpers.mmdet_config_count [--failures] [FOLDER ...]`` prints the count.
"""
import argparse
import glob
import importlib.util
import os.path as osp
import sys
import warnings
from collections import Counter

import torch
from mmengine.config import Config

__all__ = ['mmdet_configs_root', 'model_configs', 'try_build', 'count_buildable']


def mmdet_configs_root():
    """``.../site-packages/mmdet/.mim/configs``, or None without mmdet."""
    spec = importlib.util.find_spec('mmdet')  # finds the package folder, imports nothing
    if spec is None:
        return None
    return osp.join(spec.submodule_search_locations[0], '.mim', 'configs')


def model_configs(root, folders=()):
    """Relative paths of the config files under ``root`` (``_base_`` left out), sorted;
    only those of ``folders`` when given."""
    paths = glob.glob(osp.join(root, '**', '*.py'), recursive=True)
    rel = sorted(osp.relpath(p, root) for p in paths)
    rel = [r for r in rel if not r.startswith('_base_') and '__pycache__' not in r]
    if folders:
        rel = [r for r in rel if r.split(osp.sep)[0] in folders]
    return rel


def try_build(path):
    """None when the config's model builds on ``meta``, else the reason (one line);
    ``'no model'`` for a config without one."""
    import ckptzoo  # noqa: F401  (registers every type)
    from ckptzoo.registry import build_model
    from ckptzoo.utils.config_file import building_from
    try:
        cfg = Config.fromfile(path, import_custom_modules=False)
    except Exception as e:  # noqa: BLE001  (a config mmengine cannot read is a failure too)
        return f'config: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ""}'
    if 'model' not in cfg:
        return 'no model'
    try:
        with warnings.catch_warnings(), torch.device('meta'), building_from(path):
            warnings.simplefilter('ignore')
            build_model(cfg.model)
    except Exception as e:  # noqa: BLE001
        msg = str(e).splitlines()[0] if str(e) else ''
        return f'{type(e).__name__}: {msg[:200]}'
    return None


def count_buildable(root=None, folders=()):
    """``(built, failed)``: the relative paths that build, and ``{path: reason}`` of the rest."""
    root = root or mmdet_configs_root()
    built, failed = [], {}
    for rel in model_configs(root, folders):
        reason = try_build(osp.join(root, rel))
        if reason is None:
            built.append(rel)
        else:
            failed[rel] = reason
    return built, failed


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('folders', nargs='*', help='config folders (default: all)')
    parser.add_argument('--failures', action='store_true', help='print every failure')
    args = parser.parse_args(argv)
    root = mmdet_configs_root()
    if root is None:
        print('mmdet 2.28.2 is not installed')
        return 1
    built, failed = count_buildable(root, args.folders)
    total = len(built) + len(failed)
    print(f'{len(built)} of {total} mmdet 2.28.2 model configs build')
    causes = Counter(reason.split(' (')[0][:120] for reason in failed.values())
    for cause, n in causes.most_common(15):
        print(f'{n:5d}  {cause}')
    if args.failures:
        for rel, reason in failed.items():
            print(f'{rel}: {reason}')
    return 0


if __name__ == '__main__':
    sys.exit(main())
