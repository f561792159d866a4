"""Test (and evaluate) a checkpoint (mmdet 2.x's tools/test.py)."""
import argparse
import json
import os
import os.path as osp
import sys
import tempfile
import time

sys.path.insert(0, osp.dirname(osp.dirname(osp.abspath(__file__))))

import mmengine  # noqa: E402
import torch  # noqa: E402
from ckptzoo.utils.dict_action import DictAction  # noqa: E402

from ckptzoo.apis import multi_gpu_test, prepare_synthetic_data, single_gpu_test  # noqa: E402
from ckptzoo.apis.config import load_config  # noqa: E402
from ckptzoo.apis.eval_metrics import check_test_metrics  # noqa: E402
from ckptzoo.datasets import build_dataloader, build_dataset  # noqa: E402
from ckptzoo.registry import build_model  # noqa: E402
from ckptzoo.runner import MMDistributedDataParallel, init_dist, load_checkpoint  # noqa: E402
from ckptzoo.runner.checkpoint_match import CheckpointMismatch  # noqa: E402
from ckptzoo.runner.dist_utils import get_dist_info  # noqa: E402
from ckptzoo.runner.fp16 import wrap_fp16_model  # noqa: E402
from ckptzoo.runner.hooks import rfnext_init_model  # noqa: E402
from ckptzoo.utils.config_file import building_from  # noqa: E402


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description='Test (and evaluate) a model')
    parser.add_argument('config', help='test config file path')
    parser.add_argument('checkpoint', help='checkpoint file')
    parser.add_argument('--work-dir', help='where to write the evaluation metrics (json)')
    parser.add_argument('--out', help='output result file in pickle format')
    parser.add_argument('--format-only', action='store_true',
                        help='only write the results in the dataset\'s submission format (COCO '
                        'json: --eval-options jsonfile_prefix=PREFIX writes PREFIX.bbox.json)')
    parser.add_argument('--eval', type=str, nargs='+',
                        help='evaluation metrics, e.g. "mAP" for VOC, "accuracy" for '
                        'classification')
    parser.add_argument('--cfg-options', nargs='+', action=DictAction,
                        help='override config settings, as tools/train.py')
    parser.add_argument('--eval-options', nargs='+', action=DictAction,
                        help='keyword arguments of dataset.evaluate, e.g. iou_thr=0.75')
    parser.add_argument('--show', action='store_true', help='show the drawn results')
    parser.add_argument('--show-dir', help='write each test image with its detections drawn '
                        'to this directory')
    parser.add_argument('--show-score-thr', type=float, default=0.3,
                        help='draw the detections scoring above this (default 0.3)')
    parser.add_argument('--launcher', choices=['none', 'pytorch', 'slurm', 'mpi'],
                        default='none', help='job launcher')
    parser.add_argument('--local_rank', '--local-rank', type=int, default=0)
    args = parser.parse_args(argv)
    if 'LOCAL_RANK' not in os.environ:
        os.environ['LOCAL_RANK'] = str(args.local_rank)
    if not (args.out or args.eval or args.format_only or args.show or args.show_dir):
        parser.error('give at least one of --out (save the results), --eval (evaluate), '
                     '--format-only (write the submission file), --show and --show-dir (draw '
                     'the results)')
    if args.eval and args.format_only:
        parser.error('--eval and --format-only cannot be both specified')
    if args.format_only and 'jsonfile_prefix' not in (args.eval_options or {}):
        # mmdet 2.x wrote into a temporary folder it then deleted
        parser.error('--format-only needs --eval-options jsonfile_prefix=PREFIX (where the '
                     'files go)')
    if not 0 <= args.show_score_thr <= 1:
        parser.error(f'--show-score-thr must be in [0, 1], got {args.show_score_thr}')
    if (args.show or args.show_dir) and args.launcher != 'none':
        parser.error('--show and --show-dir draw in a single process: use --launcher none')
    if args.show_dir is not None:
        problem = _unwritable(args.show_dir)
        if problem:
            parser.error(f'--show-dir {args.show_dir} is not a writable directory: {problem}')
    if args.out is not None and not args.out.endswith(('.pkl', '.pickle')):
        parser.error(f'--out must be a .pkl or .pickle file, got {args.out!r}')
    return args


def _unwritable(path):
    """Why ``path`` cannot receive files (None when it can): checked before testing."""
    try:
        os.makedirs(path, exist_ok=True)
        with tempfile.TemporaryFile(dir=path):
            pass
    except OSError as e:
        return e.strerror or str(e)
    return None


def main(argv=None):
    args = parse_args(argv)
    cfg = load_config(args.config, args.cfg_options)  # errors name the file and line
    if cfg.get('cudnn_benchmark', False):
        torch.backends.cudnn.benchmark = True

    distributed = args.launcher != 'none'
    if distributed:
        init_dist(args.launcher, **cfg.get('dist_params', {}))
    rank, _ = get_dist_info()
    prepare_synthetic_data(cfg, distributed)

    test_cfg = dict(cfg.data.test)
    samples_per_gpu = test_cfg.pop('samples_per_gpu', 1)
    dataset = build_dataset(test_cfg, dict(test_mode=True))
    data_loader = build_dataloader(dataset, samples_per_gpu=samples_per_gpu,
                                   workers_per_gpu=cfg.data.get('workers_per_gpu', 2),
                                   dist=distributed, shuffle=False)

    model_cfg = dict(cfg.model)
    model_cfg['train_cfg'] = None  # as mmdet's test.py: MaskRCNN takes it positionally
    if cfg.get('test_cfg') is not None and 'test_cfg' not in model_cfg:
        model_cfg['test_cfg'] = cfg.test_cfg
    with building_from(cfg.filename):
        model = build_model(model_cfg)
    rfnext_init_model(model, cfg)  # an RFSearchHook's structure, as mmdet's test.py
    if args.eval:  # before inference: a metric the dataset or the model cannot give
        try:
            check_test_metrics(model, dataset, args.eval)
        except ValueError as exc:
            sys.exit(f'error: {exc}')
    fp16_cfg = cfg.get('fp16')
    if fp16_cfg is not None:
        wrap_fp16_model(model, fp16_cfg.get('dtype', 'float16'))
    try:  # every tensor of the model from the checkpoint: another class count or depth fails
        checkpoint = load_checkpoint(model, args.checkpoint, map_location='cpu', complete=True)
    except CheckpointMismatch as exc:
        sys.exit(f'error: {exc}')
    classes = checkpoint.get('meta', {}).get('CLASSES')
    model.CLASSES = tuple(classes) if classes else getattr(dataset, 'CLASSES', None)

    device = 'cuda' if torch.cuda.is_available() else 'cpu'
    model = model.to(device)
    if distributed:
        model = MMDistributedDataParallel(
            model, device_ids=[torch.cuda.current_device()] if device == 'cuda' else None,
            broadcast_buffers=False)
        outputs = multi_gpu_test(model, data_loader)
    else:
        outputs = single_gpu_test(model, data_loader, args.show, args.show_dir,
                                  args.show_score_thr)

    if rank == 0:
        print()
        if args.out:
            print(f'writing results to {args.out}')
            mmengine.dump(outputs, args.out)
        if args.format_only:
            if not hasattr(dataset, 'format_results'):
                raise NotImplementedError(f'{type(dataset).__name__} has no submission format '
                                          f'(format_results); use --out or --eval')
            result_files, _ = dataset.format_results(outputs, **args.eval_options)
            for kind, path in sorted(set(result_files.items())):
                print(f'{kind} results written to {path}')
        if args.eval:
            eval_kwargs = dict(cfg.get('evaluation') or {})  # None: no in-training evaluation
            for key in ('interval', 'tmpdir', 'start', 'gpu_collect', 'save_best', 'rule',
                        'by_epoch', 'dynamic_intervals'):
                eval_kwargs.pop(key, None)
            eval_kwargs.update(args.eval_options or {})
            eval_kwargs['metric'] = args.eval if len(args.eval) > 1 else args.eval[0]
            metric = dataset.evaluate(outputs, **eval_kwargs)
            print(metric)
            if args.work_dir is not None:
                os.makedirs(args.work_dir, exist_ok=True)
                timestamp = time.strftime('%Y%m%d_%H%M%S', time.localtime())
                with open(osp.join(args.work_dir, f'eval_{timestamp}.json'), 'w') as f:
                    json.dump(dict(config=args.config, checkpoint=args.checkpoint,
                                   metric={k: v if isinstance(v, str) else float(v)
                                           for k, v in metric.items()}), f)
    if distributed:
        torch.distributed.destroy_process_group()


if __name__ == '__main__':
    main()
