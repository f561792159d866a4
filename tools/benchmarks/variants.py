"""The config's variants: one memory saver (or a combination) each, run by the real runner.

A variant is :class:`~ckptzoo.apis.options.TrainingOptions` (``fp16``, ``cumulative_iters``;
the batch per iteration follows from ``--batch``), a plan (the ``checkpoint_plan`` /
``checkpoint_segments`` config keys) and changes to the model config (``--cfg-options`` keys
under ``model.``). The run is the one ``ckptzoo.apis.build_training`` assembles for
``tools/train.py``, on generated VOC data.
"""
import logging
from typing import Any, NamedTuple

from . import synthetic


class Variant(NamedTuple):
    """Changes to a config; ``Variant()`` is the config as it is (the backbone's ``with_cp``
    off)."""

    options: dict = {}   # TrainingOptions fields but samples_per_gpu (from --batch)
    plan: dict = {}      # top-level config keys: checkpoint_plan, checkpoint_segments
    model: dict = {}     # model config changes, dotted keys under ``model.``
    fp16: dict = {}      # the ``fp16`` dict when options switch fp16 on (default FP16_CFG)


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
    options.apply_to(cfg, fp16_cfg=settings.fp16 or FP16_CFG)
    return options


class _Quiet(logging.Logger):
    def __init__(self):
        super().__init__('ckptzoo.benchmark', logging.WARNING)


def bench_run(args, cfg, max_iters, device, dataset=None):
    """The training run of ``cfg`` as ``ckptzoo.apis.build_training`` assembles it for
    ``tools/train.py``, on ``dataset`` (a dataset config; default the generated VOC data), for
    ``max_iters`` iterations, with no checkpoints, logs or lr schedule (they would only add
    noise to the step)."""
    from ckptzoo.apis import build_training
    from ckptzoo.datasets import build_dataset
    synthetic.step_only(cfg, 'ckptzoo_bench_', dict(type='IterBasedRunner', max_iters=max_iters),
                        args.seed)
    cfg.workflow = [('train', max_iters)]
    cfg.device = device
    cfg.data.workers_per_gpu = 0
    cfg.data.pop('train_dataloader', None)
    dataset = build_dataset(dataset or synthetic.voc_dataset(cfg, args.data_root,
                                                             args.img_size))
    return build_training(cfg, datasets=[dataset], logger=_Quiet())


def run_variant(args, variant, cfg=None):
    """One :class:`Variant` of the config (``cfg``, default ``args.config`` on the generated
    VOC data; a given ``cfg`` trains on its own ``data.train``) through the real runner and
    optimizer hook."""
    from ckptzoo.memory import StepMeter
    device = setup_job(args)
    dataset = None if cfg is None else cfg.data.train
    cfg = load_config(args) if cfg is None else cfg
    options = variant_cfg(cfg, variant, args.batch)
    k = options.cumulative_iters
    meter = StepMeter(device, args.warmup, args.iters, k)
    run = bench_run(args, cfg, meter.total_iters, device, dataset)
    meter.attach(run.runner)
    run.runner.run(run.data_loaders, run.workflow)
    return dict(meter.result(), optimizer_hook=run.optimizer_config['type'],
                samples_per_gpu=cfg.data.samples_per_gpu, cumulative_iters=k)
