"""Train a model from a config file (mmdet 2.x's tools/train.py)."""
import argparse
import os
import os.path as osp
import sys
import time
import warnings

sys.path.insert(0, osp.dirname(osp.dirname(osp.abspath(__file__))))

import torch  # noqa: E402
from ckptzoo.utils.dict_action import DictAction  # noqa: E402

import ckptzoo  # noqa: E402
from ckptzoo.apis import (build_train_datasets, build_train_model,  # noqa: E402
                          prepare_synthetic_data, set_random_seed, train_model)
from ckptzoo.apis.config import check_config, load_config  # noqa: E402
from ckptzoo.apis.plan import check_plan_outputs  # noqa: E402
from ckptzoo.memory import InfeasibleBudget  # noqa: E402
from ckptzoo.runner import TrainingPreempted, init_dist  # noqa: E402
from ckptzoo.runner.preemption import exit_within_deadline  # noqa: E402
from ckptzoo.runner.process_exit import run_and_exit  # noqa: E402
from ckptzoo.runner.checkpoint_match import CheckpointMismatch  # noqa: E402
from ckptzoo.runner.dist_utils import get_dist_info  # noqa: E402
from ckptzoo.runner.work_dir import check_work_dir  # noqa: E402
from ckptzoo.runner.work_dir_lock import WorkDirLocked, lock_work_dir  # noqa: E402
from ckptzoo.utils.config_dump import config_dump_path  # noqa: E402
from ckptzoo.utils.logger import get_root_logger  # noqa: E402


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description='Train a model')
    parser.add_argument('config', help='train config file path')
    parser.add_argument('--work-dir', help='the dir to save logs and models')
    parser.add_argument('--resume-from', help='the checkpoint file to resume from')
    parser.add_argument('--auto-resume', action='store_true',
                        help='resume from the latest checkpoint in the work_dir automatically')
    parser.add_argument('--load-from', help='the checkpoint file to start from (weights only)')
    parser.add_argument('--no-validate', action='store_true',
                        help='do not evaluate the checkpoint during training')
    parser.add_argument('--seed', type=int, default=None, help='random seed')
    parser.add_argument('--diff-seed', action='store_true',
                        help='different seeds for different ranks (the model\'s random draws, '
                        'e.g. dropout; the data samplers keep rank 0\'s seed, so the ranks '
                        'still see disjoint samples)')
    parser.add_argument('--deterministic', action='store_true',
                        help='deterministic options for the CUDNN backend')
    parser.add_argument('--cfg-options', nargs='+', action=DictAction,
                        help='override config settings, e.g. optimizer.lr=0.01 '
                        'data.samples_per_gpu=4 "model.backbone.out_indices=(1,2,3)"')
    parser.add_argument('--auto-scale-lr', action='store_true',
                        help='scale the lr by the total batch / auto_scale_lr.base_batch_size')
    parser.add_argument('--launcher', choices=['none', 'pytorch', 'slurm', 'mpi'],
                        default='none', help='job launcher')
    parser.add_argument('--local_rank', '--local-rank', type=int, default=0)
    args = parser.parse_args(argv)
    if 'LOCAL_RANK' not in os.environ:
        os.environ['LOCAL_RANK'] = str(args.local_rank)
    return args


def _setup_multi_processes(cfg):
    """mmdet 2.x keys: opencv_num_threads, mp_start_method."""
    if cfg.get('mp_start_method') is not None:
        import multiprocessing as mp
        if mp.get_start_method(allow_none=True) is None:
            mp.set_start_method(cfg.mp_start_method)
    if cfg.get('opencv_num_threads') is not None:
        try:
            import cv2
            cv2.setNumThreads(cfg.opencv_num_threads)
        except ImportError:
            pass


def main(argv=None):
    args = parse_args(argv)
    cfg = load_config(args.config, args.cfg_options)  # errors name the file and line
    with warnings.catch_warnings(record=True) as config_warnings:  # logged again below
        warnings.simplefilter('always')
        check_config(cfg, distributed=args.launcher != 'none', validate=not args.no_validate,
                     complete=True)
    for w in config_warnings:
        warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    _setup_multi_processes(cfg)
    if cfg.get('cudnn_benchmark', False):
        torch.backends.cudnn.benchmark = True

    # work_dir: the flag, then the config, then ./work_dirs/<config name>
    if args.work_dir is not None:
        cfg.work_dir = args.work_dir
    elif cfg.get('work_dir') is None:
        cfg.work_dir = osp.join('./work_dirs', osp.splitext(osp.basename(args.config))[0])
    cfg.work_dir = check_work_dir(cfg.work_dir, '--work-dir' if args.work_dir is not None
                                  else f'work_dir in {args.config}')
    if args.resume_from is not None:
        cfg.resume_from = args.resume_from
    if args.load_from is not None:
        cfg.load_from = args.load_from
    cfg.auto_resume = args.auto_resume or cfg.get('auto_resume', False)
    if args.auto_scale_lr:
        if cfg.get('auto_scale_lr') is None or 'base_batch_size' not in cfg.auto_scale_lr:
            raise ValueError('--auto-scale-lr needs auto_scale_lr = dict(base_batch_size=N) '
                             'in the config')
        cfg.auto_scale_lr.enable = True

    if args.launcher == 'none':
        distributed = False
    else:
        distributed = True
        init_dist(args.launcher, **cfg.get('dist_params', {}))
    rank, world_size = get_dist_info()

    try:  # before anything is written into the work dir, or anything is built
        lock = lock_work_dir(cfg.work_dir, distributed)
    except WorkDirLocked as exc:
        sys.exit(f'error: {exc}')
    try:
        _train(args, cfg, distributed, rank, world_size, config_warnings)
    except TrainingPreempted as exc:
        exit_within_deadline(exc)  # stopped at once: what is left of the exit is bounded too
        raise
    finally:  # also on an exception and on preemption (a kill -9 releases the flock)
        if lock is not None:
            lock.release()


def _train(args, cfg, distributed, rank, world_size, config_warnings=()):
    os.makedirs(osp.abspath(cfg.work_dir), exist_ok=True)
    if cfg.get('memory_budget') is not None:  # the plan's files: checked before any work
        try:
            check_plan_outputs(cfg.work_dir)
        except OSError as exc:
            sys.exit(f'error: {exc}; training did not start')
    timestamp = time.strftime('%Y%m%d_%H%M%S', time.localtime())
    dump_file, source = config_dump_path(args.config, cfg.work_dir, timestamp)
    if rank == 0:
        cfg.dump(dump_file)  # never over the config file or its _base_ files
    log_file = osp.join(cfg.work_dir, f'{timestamp}.log')
    logger = get_root_logger(log_file=log_file, log_level=cfg.get('log_level', 'INFO'))
    if source is not None:
        logger.info(f'The merged config is saved as {dump_file}: {source} is a file the config '
                    'is read from, which is never overwritten')
    for w in config_warnings:  # in the run's log too, not only on stderr before it
        logger.warning(str(w.message))

    meta = dict()
    meta['env_info'] = f'torch {torch.__version__}, ckptzoo {ckptzoo.__version__}, ' \
                       f'CUDA available: {torch.cuda.is_available()}'
    meta['config'] = cfg.pretty_text
    logger.info(f'Distributed training: {distributed} (world size {world_size})')
    logger.info(f'Config:\n{cfg.pretty_text}')

    seed = args.seed if args.seed is not None else cfg.get('seed')
    if seed is None:
        seed = 0
    if args.diff_seed:
        seed += rank
    logger.info(f'Set random seed to {seed}, deterministic: {args.deterministic}')
    set_random_seed(seed, deterministic=args.deterministic)
    cfg.seed = seed
    meta['seed'] = seed
    meta['exp_name'] = osp.basename(args.config)

    prepare_synthetic_data(cfg, distributed)
    model = build_train_model(cfg)
    datasets = build_train_datasets(cfg)
    if hasattr(datasets[0], 'CLASSES'):
        meta['CLASSES'] = list(datasets[0].CLASSES)
        model.CLASSES = datasets[0].CLASSES
    try:
        train_model(model, datasets, cfg, distributed=distributed,
                    validate=not args.no_validate, timestamp=timestamp, meta=meta,
                    logger=logger)
    except InfeasibleBudget as exc:  # planned before the first step: nothing was trained
        logger.error(f'memory plan: {exc}')
        sys.exit(f'error: {exc}; training did not start')
    except CheckpointMismatch as exc:  # checked before loading: nothing was trained
        logger.error(str(exc))
        sys.exit(f'error: {exc}; training did not start')
    except TrainingPreempted as exc:  # every rank stopped at the same iteration
        if distributed and not exc.stopped_now:
            torch.distributed.destroy_process_group()
        raise
    if distributed:  # every rank done with its collectives before any tears gloo down
        torch.distributed.barrier()
        torch.distributed.destroy_process_group()


def command_line(argv=None):
    """``python tools/train.py``: :func:`main`, then the end of the process
    (:func:`~ckptzoo.runner.process_exit.run_and_exit`)."""
    run_and_exit(main, argv)


if __name__ == '__main__':
    command_line()
