"""The config's variants: one memory saver (or a combination) each, run by the real runner.

A variant is :class:`~ckptzoo.apis.options.TrainingOptions` (``fp16``, ``cumulative_iters``;
the batch per iteration follows from ``--batch``), a plan (the ``checkpoint_plan`` /
``checkpoint_segments`` config keys) and changes to the model config (``--cfg-options`` keys
under ``model.``). The run is the one ``ckptzoo.apis.build_training`` assembles for
``tools/train.py``, on generated VOC data.
"""
import logging
import os.path as osp
import tempfile
from typing import Any, NamedTuple


class Variant(NamedTuple):
    """Changes to a config; ``Variant()`` is the config as it is (the backbone's ``with_cp``
    off)."""

    options: dict = {}   # TrainingOptions fields but samples_per_gpu (from --batch)
    plan: dict = {}      # top-level config keys: checkpoint_plan, checkpoint_segments
    model: dict = {}     # model config changes, dotted keys under ``model.``


#: every variant starts from these: the backbone's with_cp off, no pretrained weights (nothing
#: to download; the step is the same)
MODEL_DEFAULTS: dict[str, Any] = {'backbone.with_cp': False, 'backbone.init_cfg': None}
#: what ``fp16=True`` sets
FP16_CFG = dict(loss_scale=512.)


def load_config(args):
    from mmengine.config import Config
    return Config.fromfile(args.config)


def setup_job(args):
    """A job's process: seeded, ``cudnn.benchmark`` off; returns the device (``--device``, or
    ``cuda`` when available)."""
    import torch

    from ckptzoo.apis import resolve_device, set_random_seed
    torch.backends.cudnn.benchmark = False
    set_random_seed(args.seed)
    if args.device == 'cuda' and not torch.cuda.is_available():
        raise RuntimeError('--device cuda, but torch.cuda.is_available() is False')
    return resolve_device(dict(device=args.device))


def dataset_cfg(args, cfg):
    """The generated VOC data through the config's pipeline, Resize set to --img-size."""
    from ckptzoo.datasets import generate_voc
    from ckptzoo.datasets.synthetic_voc import SYNTHETIC_CLASSES
    from ckptzoo.memory.step import train_pipeline
    devkit = generate_voc(args.data_root, num_trainval=64, num_test=0, img_size=256, seed=0)
    w, h = args.img_size if len(args.img_size) == 2 else args.img_size * 2
    pipeline = [dict(t) for t in train_pipeline(cfg)]
    if not pipeline:
        raise KeyError('the config has no training pipeline (data.train.pipeline)')
    resizes = [t for t in pipeline if t['type'] == 'Resize']
    if not resizes:
        raise KeyError('the training pipeline has no Resize to set the image size')
    for t in resizes:
        t.update(img_scale=(w, h), keep_ratio=False)
        t.pop('ratio_range', None)
    return dict(type='VOCDataset', classes=SYNTHETIC_CLASSES,
                ann_file=osp.join(devkit, 'VOC2007', 'ImageSets', 'Main', 'trainval.txt'),
                img_prefix=osp.join(devkit, 'VOC2007') + '/', pipeline=pipeline)


def variant_cfg(cfg, settings, batch):
    """Set the :class:`Variant` ``settings`` in ``cfg`` (in place), ``batch`` images per
    optimizer step; returns the options."""
    from ckptzoo.apis.options import TrainingOptions
    k = settings.options.get('cumulative_iters', 1)
    if batch % k:
        raise ValueError(f'--batch must be divisible by cumulative_iters={k}, got {batch}')
    cfg.model.backbone.pop('pretrained', None)
    cfg.model.pop('pretrained', None)
    cfg.merge_from_dict({f'model.{key}': value
                         for key, value in {**MODEL_DEFAULTS, **settings.model}.items()})
    for key, value in settings.plan.items():  # replaces the config's own plan
        cfg[key] = value
    options = TrainingOptions(**settings.options, samples_per_gpu=batch // k)
    options.apply_to(cfg, fp16_cfg=FP16_CFG)
    return options


class _Quiet(logging.Logger):
    def __init__(self):
        super().__init__('ckptzoo.benchmark', logging.WARNING)


def bench_run(args, cfg, max_iters, device):
    """The training run of ``cfg`` as ``ckptzoo.apis.build_training`` assembles it for
    ``tools/train.py``, on the generated data, for ``max_iters`` iterations, with no
    checkpoints, logs or lr schedule (they would only add noise to the step)."""
    from ckptzoo.apis import build_training
    from ckptzoo.datasets import build_dataset
    cfg.runner = dict(type='IterBasedRunner', max_iters=max_iters)
    cfg.workflow = [('train', max_iters)]
    cfg.lr_config = cfg.checkpoint_config = cfg.log_config = None
    cfg.custom_hooks = None
    cfg.device = device
    cfg.seed = args.seed
    cfg.data.workers_per_gpu = 0
    cfg.data.pop('train_dataloader', None)
    cfg.work_dir = tempfile.mkdtemp(prefix='ckptzoo_bench_')
    dataset = build_dataset(dataset_cfg(args, cfg))
    return build_training(cfg, datasets=[dataset], logger=_Quiet())


def run_variant(args, variant):
    """One :class:`Variant` of the config through the real runner and optimizer hook."""
    from ckptzoo.memory import StepMeter
    device = setup_job(args)
    cfg = load_config(args)
    options = variant_cfg(cfg, variant, args.batch)
    k = options.cumulative_iters
    meter = StepMeter(device, args.warmup, args.iters, k)
    run = bench_run(args, cfg, meter.total_iters, device)
    meter.attach(run.runner)
    run.runner.run(run.data_loaders, run.workflow)
    return dict(meter.result(), optimizer_hook=run.optimizer_config['type'],
                samples_per_gpu=cfg.data.samples_per_gpu, cumulative_iters=k)
