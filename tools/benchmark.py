"""Peak memory and time per training step of the memory savers, in one command.

    python tools/benchmark.py [CONFIG] [--img-size W [H]] [--batch B] [--iters N] [--warmup W]
                              [--peers] [--peer-plans NAME ...] [--rounds N]
                              [--device cpu|cuda] [--out-dir DIR] [--data-root DIR]

Each variant of CONFIG (default: RetinaNet R50-FPN on VOC) runs in its own process: ``base``,
``fp16`` (``fp16 = dict(loss_scale=512.)``), ``accum2`` (``cumulative_iters=2`` at half the
batch, so one optimizer step sees the same images), ``with_cp`` (``backbone.with_cp=True``: the
backbone only), ``cp_fp16_accum2`` (those three), ``cp_full`` and ``cp_selective`` (every
checkpoint unit of the model, backbone, neck and head, in that mode:
``checkpoint_plan = {'*': mode}``), ``cp_full_seg`` (``cp_full`` with the FPN's top-down levels
as one segment, ``checkpoint_segments``) and ``frozen_bn`` (the backbone's BN frozen:
``norm_cfg=dict(type='BN', requires_grad=False)``, ``norm_eval=True``).
The step is the real one: the model, optimizer and optimizer hook are built from the
modified config by ``ckptzoo.apis.build_training`` (as for ``tools/train.py``) and run by an
``IterBasedRunner`` (``train_step`` + the optimizer hook's ``after_train_iter``); hooks of this
tool time each iteration and read memory. Data: a generated VOC-format dataset (written once to
``--data-root``) through the config's own training pipeline, its ``Resize`` set to exactly
``--img-size``; no pretrained weights.

Per variant: ``--warmup`` optimizer steps, ``--iters`` timed steps, then one probe step.

* time: the median (min-max) per optimizer step of ``--batch`` images (for accumulation the sum
  of its ``k`` iterations), ``time.perf_counter`` around each iteration (``train_step`` and the
  optimizer hook; not data loading), with ``torch.cuda.synchronize`` on CUDA;
* memory on CUDA: ``max_memory_allocated`` / ``max_memory_reserved`` over the timed steps
  (statistics reset after the warm-up, ``cudnn.benchmark`` off); on CPU: the exact peak of live
  tensor storage during the probe step (``ckptzoo.utils.memory.LiveTensorTracker``: parameters,
  buffers, gradients, optimizer state, the batch and every tensor the step makes);
* saved for backward: the bytes autograd keeps from the forward, parameters left out (they live
  anyway; ``SavedTensorCounter(include_params=False)``, during the probe step, the largest of its
  iterations). Selective checkpointing keeps its tensors outside those hooks, so for it read:
* held at forward end (CPU): the live tensor bytes when the forward pass ends, less those that
  existed before the step (parameters, gradients, optimizer state, batch): what the forward
  keeps for backward, whoever keeps it.

``--peers`` adds, on the same input: torchvision's RetinaNet built as the config (BatchNorm in
eval mode with trained affine parameters from layer2 on, conv1 + layer1 frozen, P6 from C5) and
as torchvision builds it by default (``FrozenBatchNorm2d``, P6 from P5), and ckptzoo's
ResNet-50 / DenseNet-121 / Swin-T plain, ``'full'`` (= ``with_cp``) and ``'selective'`` against
torchvision's (DenseNet's ``memory_efficient``, and its DenseNet wrapped whole in one selective
checkpoint with ckptzoo's policy) and timm's (``set_grad_checkpointing()``; timm is optional:
``pip install .[bench]``). ``--peer-plans`` adds ckptzoo rows for plans per
unit type (:data:`PEER_PLANS`, e.g. ``'full'`` on the blocks only, timm's units). Ratios are
measured in one run, side by side; on a shared machine ``--rounds N`` runs every job ``N``
times round-robin (A B C A B C ...): times then pool all steps of all rounds, and a ratio is the
median of per-step ratios taken within each round, so a slow spell weighs on both sides.
"""
import argparse
import json
import logging
import os
import os.path as osp
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import traceback

sys.path.insert(0, osp.dirname(osp.dirname(osp.abspath(__file__))))

DEFAULT_CONFIG = 'configs/voc/retinanet_r50_fpn_1x_voc0712.py'
ROOT = osp.dirname(osp.dirname(osp.abspath(__file__)))
MIB = 2 ** 20

#: name -> changes to the config: backbone with_cp, fp16, cumulative_iters, a checkpoint plan
#: for every unit, frozen backbone BN
VARIANTS = {
    'base': dict(),
    'fp16': dict(fp16=True),
    'accum2': dict(k=2),
    'with_cp': dict(with_cp=True),
    'cp_fp16_accum2': dict(with_cp=True, fp16=True, k=2),
    'cp_full': dict(plan='full'),
    'cp_full_seg': dict(plan='full', segments=[['neck.level2', 'neck.level0']]),
    'cp_selective': dict(plan='selective'),
    'frozen_bn': dict(frozen_bn=True),
}
BACKBONES = ('resnet50', 'densenet121', 'swin_t')
#: peer jobs: (model, implementation, checkpointing: '' plain, 'cp' the implementation's own,
#: 'selective' ckptzoo's selective mode; torchvision's DenseNet also wrapped whole in one
#: selective checkpoint with ckptzoo's policy, the plain way to apply that policy)
PEERS = [('retinanet', 'torchvision', ''), ('retinanet', 'torchvision-default', '')] + [
    (arch, impl, cp) for arch in BACKBONES
    for impl, cps in (('ckptzoo', ('', 'cp', 'selective')),
                      ('torchvision', ('', 'cp', 'selective') if arch == 'densenet121'
                       else ('', )),
                      ('timm', ('', 'cp')))
    for cp in cps]
CP_NAMES = {'ckptzoo': "'full' (with_cp)", 'torchvision': 'memory_efficient',
            'timm': 'set_grad_checkpointing'}
#: ckptzoo plans per unit type for --peer-plans: name -> (label, {backbone: plan}); a plan
#: starts from every unit plain; "blocks" are ResNet / Swin blocks and DenseNet dense layers.
#: Beside with_cp's ('full' on every unit: also the stem and the DenseNet transitions / Swin
#: patch embedding and merging) and 'selective' on every unit.
PEER_PLANS = {
    'full_blocks': ("'full' on {blocks} only (timm's units)", {
        'resnet50': {'layer*': 'full'}, 'swin_t': {'stages.*.blocks.*': 'full'},
        'densenet121': {'denseblock*': 'full'}}),
    'selective_blocks': ("'selective' on {blocks} only", {
        'resnet50': {'layer*': 'selective'}, 'swin_t': {'stages.*.blocks.*': 'selective'},
        'densenet121': {'denseblock*': 'selective'}}),
    'selective_blocks_full_rest': ("'selective' on {blocks}, 'full' on the rest", {
        arch: {'*': 'full', blocks: 'selective'} for arch, blocks in (
            ('resnet50', 'layer*'), ('swin_t', 'stages.*.blocks.*'),
            ('densenet121', 'denseblock*'))}),
    # the dense layers that hold most (early, large resolution) 'selective', the rest 'full'
    'selective_early_blocks': ("'selective' on dense blocks 1-2, 'full' on 3-4 (dense layers "
                               "only)", {'densenet121': {'denseblock[12].*': 'selective',
                                                         'denseblock[34].*': 'full'}}),
}
#: the config's own variants in the RetinaNet rows of the peers table: variant -> checkpointing
RETINANET_ROWS = {'base': '—', 'with_cp': 'with_cp (backbone)', 'cp_full': "'full' (all units)",
                  'cp_full_seg': "'full' (all units, FPN top-down one segment)",
                  'cp_selective': "'selective' (all units)", 'frozen_bn': 'frozen BN'}


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('config', nargs='?', default=DEFAULT_CONFIG,
                        help=f'detector config (default {DEFAULT_CONFIG})')
    parser.add_argument('--img-size', type=int, nargs='+', default=[320],
                        help='training image size: W [H] (Resize to exactly this; default 320)')
    parser.add_argument('--batch', type=int, default=2, help='images per optimizer step')
    parser.add_argument('--iters', type=int, default=5, help='timed optimizer steps')
    parser.add_argument('--warmup', type=int, default=2, help='untimed steps first')
    parser.add_argument('--variants', nargs='+', default=list(VARIANTS), choices=list(VARIANTS))
    parser.add_argument('--peers', action='store_true',
                        help='add torchvision / timm on the same workloads')
    parser.add_argument('--peer-only', nargs='+', choices=('retinanet',) + BACKBONES,
                        help='with --peers: only these models')
    parser.add_argument('--peer-plans', nargs='+', default=[], choices=list(PEER_PLANS),
                        help='with --peers: ckptzoo rows for these per-unit-type plans too')
    parser.add_argument('--rounds', type=int, default=1,
                        help='run every job this many times, round-robin (A B C A B C ...); '
                        'times pool all rounds, ratios pair the steps of each round')
    parser.add_argument('--peer-batch', type=int, default=4, help='batch of the backbone peers')
    parser.add_argument('--peer-img-size', type=int, default=224,
                        help='square input of the backbone peers')
    parser.add_argument('--device', choices=['cpu', 'cuda'], default=None,
                        help='default: cuda when available')
    parser.add_argument('--data-root', default='data/benchmark_voc',
                        help='where the generated VOC-format data is cached')
    parser.add_argument('--out-dir', default='work_dirs/benchmark',
                        help='the markdown table and the PNG charts go here')
    parser.add_argument('--seed', type=int, default=0)
    parser.add_argument('--threads', type=int, default=None,
                        help='torch.set_num_threads in every job (default: torch\'s choice)')
    parser.add_argument('--job', help=argparse.SUPPRESS)      # internal: one variant / peer
    parser.add_argument('--result', help=argparse.SUPPRESS)   # internal: its JSON result file
    args = parser.parse_args(argv)
    if len(args.img_size) not in (1, 2) or min(args.img_size) < 32:
        parser.error(f'--img-size takes W or W H, each >= 32, got {args.img_size}')
    for name in ('batch', 'iters', 'peer_batch', 'peer_img_size', 'rounds'):
        if getattr(args, name) < 1:
            parser.error(f'--{name.replace("_", "-")} must be >= 1, got {getattr(args, name)}')
    if not osp.exists(args.config) and osp.exists(osp.join(ROOT, args.config)):
        args.config = osp.join(ROOT, args.config)  # the default, from another directory
    if args.warmup < 0:
        parser.error(f'--warmup must be >= 0, got {args.warmup}')
    return args


# ------------------------------------------------------------------------------------------
# measuring (in the job's process)
# ------------------------------------------------------------------------------------------
class Meter:
    """Warm-up steps, timed steps, then one probe step (memory counters), each step being
    ``k`` iterations; the caller calls ``before_iter`` / ``after_forward`` / ``after_iter``."""

    def __init__(self, device, warmup, iters, k=1):
        import torch
        self.torch = torch
        self.cuda = device.startswith('cuda')
        self.warmup, self.iters, self.k = warmup, iters, k
        self.total_iters = (warmup + iters + 1) * k
        self.times = []
        self._elapsed = 0.0
        self.peak_live = self.saved = 0
        self.held = None
        self.max_allocated = self.max_reserved = None
        self._tracker = self._saved_counter = None

    def _phase(self, i):
        step = i // self.k
        return 'warmup' if step < self.warmup else 'timed' \
            if step < self.warmup + self.iters else 'probe'

    def _sync(self):
        if self.cuda:
            self.torch.cuda.synchronize()

    def before_iter(self, i, state):
        from ckptzoo.utils.memory import LiveTensorTracker, SavedTensorCounter
        phase = self._phase(i)
        if i == self.warmup * self.k and self.cuda:
            self._sync()
            self.torch.cuda.reset_peak_memory_stats()
        if phase == 'probe':
            if not self.cuda:
                self._tracker = LiveTensorTracker()
                self._tracker.__enter__()
                self._tracker.track(state)
            self._saved_counter = SavedTensorCounter(include_params=False)
            self._saved_counter.__enter__()
        self._sync()
        self._t0 = time.perf_counter()

    def after_forward(self, i):
        if self._tracker is not None:
            self.held = self._tracker.live_bytes - self._tracker.baseline_bytes
        if self._saved_counter is not None:
            self._saved_counter.__exit__(None, None, None)
            self.saved = max(self.saved, self._saved_counter.bytes)
            self._saved_counter = None

    def after_iter(self, i):
        self._sync()
        elapsed = time.perf_counter() - self._t0
        phase = self._phase(i)
        if phase == 'timed':
            self._elapsed += elapsed
            if (i + 1) % self.k == 0:
                self.times.append(self._elapsed)
                self._elapsed = 0.0
            if i + 1 == (self.warmup + self.iters) * self.k and self.cuda:
                self.max_allocated = self.torch.cuda.max_memory_allocated()
                self.max_reserved = self.torch.cuda.max_memory_reserved()
        if self._tracker is not None:
            self._tracker.__exit__(None, None, None)
            self.peak_live = max(self.peak_live, self._tracker.peak_bytes)
            self._tracker = None

    def result(self):
        return dict(times=self.times, peak_live=self.peak_live if not self.cuda else None,
                    saved=self.saved, held=self.held, max_allocated=self.max_allocated,
                    max_reserved=self.max_reserved)


def _load_config(args):
    from mmengine.config import Config
    return Config.fromfile(args.config)


def _train_pipeline(cfg):
    train = cfg.data.train
    while 'pipeline' not in train and 'dataset' in train:  # RepeatDataset and friends
        train = train.dataset
    pipeline = train.get('pipeline', cfg.get('train_pipeline'))
    if pipeline is None:
        raise KeyError('the config has no training pipeline (data.train.pipeline)')
    return [dict(t) for t in pipeline]


def _dataset_cfg(args, cfg):
    """The generated VOC data through the config's pipeline, Resize set to --img-size."""
    from ckptzoo.datasets import generate_voc
    from ckptzoo.datasets.synthetic_voc import SYNTHETIC_CLASSES
    devkit = generate_voc(args.data_root, num_trainval=64, num_test=0, img_size=256, seed=0)
    w, h = args.img_size if len(args.img_size) == 2 else args.img_size * 2
    pipeline = _train_pipeline(cfg)
    resizes = [t for t in pipeline if t['type'] == 'Resize']
    if not resizes:
        raise KeyError('the training pipeline has no Resize to set the image size')
    for t in resizes:
        t.update(img_scale=(w, h), keep_ratio=False)
        t.pop('ratio_range', None)
    return dict(type='VOCDataset', classes=SYNTHETIC_CLASSES,
                ann_file=osp.join(devkit, 'VOC2007', 'ImageSets', 'Main', 'trainval.txt'),
                img_prefix=osp.join(devkit, 'VOC2007') + '/', pipeline=pipeline)


def _variant_cfg(cfg, variant, batch):
    settings = VARIANTS[variant]
    fp16, k = settings.get('fp16', False), settings.get('k', 1)
    backbone = cfg.model.backbone
    backbone.init_cfg = None          # nothing to download; the step is the same
    backbone.pop('pretrained', None)
    cfg.model.pop('pretrained', None)
    backbone.with_cp = settings.get('with_cp', False)
    if settings.get('plan'):
        cfg.checkpoint_plan = {'*': settings['plan']}
    if settings.get('segments'):
        cfg.checkpoint_segments = settings['segments']
    if settings.get('frozen_bn'):
        backbone.norm_cfg = dict(backbone.get('norm_cfg') or dict(type='BN'),
                                 requires_grad=False)
        backbone.norm_eval = True
    if fp16:
        cfg.fp16 = dict(loss_scale=512.)
    else:
        cfg.pop('fp16', None)
    if k > 1:
        if batch % k:
            raise ValueError(f'--batch must be divisible by cumulative_iters={k}, got {batch}')
        optimizer_config = dict(cfg.get('optimizer_config') or {})
        optimizer_config['cumulative_iters'] = k
        cfg.optimizer_config = optimizer_config
    cfg.data.samples_per_gpu = batch // k
    return k


class _Quiet(logging.Logger):
    def __init__(self):
        super().__init__('ckptzoo.benchmark', logging.WARNING)


def _device(args):
    import torch
    if args.device == 'cuda' and not torch.cuda.is_available():
        raise RuntimeError('--device cuda, but torch.cuda.is_available() is False')
    return args.device or ('cuda' if torch.cuda.is_available() else 'cpu')


def _build_loader(args, cfg, samples_per_gpu):
    from ckptzoo.datasets import build_dataloader, build_dataset
    dataset = build_dataset(_dataset_cfg(args, cfg))
    return build_dataloader(dataset, samples_per_gpu, 0, num_gpus=1, dist=False,
                            seed=args.seed, shuffle=True)


def _bench_run(args, cfg, max_iters, device):
    """The training run of ``cfg`` as ``ckptzoo.apis.build_training`` assembles it for
    ``tools/train.py``, on the generated data, for ``max_iters`` iterations, with no
    checkpoints, logs or lr schedule (they would only add noise to the step)."""
    import tempfile as _tempfile

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
    cfg.work_dir = _tempfile.mkdtemp(prefix='ckptzoo_bench_')
    dataset = build_dataset(_dataset_cfg(args, cfg))
    return build_training(cfg, datasets=[dataset], logger=_Quiet())


def run_variant(args, variant):
    """One variant of the config through the real runner and optimizer hook."""
    import torch
    from ckptzoo.apis import set_random_seed
    from ckptzoo.runner.hooks import Hook

    torch.backends.cudnn.benchmark = False
    set_random_seed(args.seed)
    device = _device(args)
    cfg = _load_config(args)
    k = _variant_cfg(cfg, variant, args.batch)
    meter = Meter(device, args.warmup, args.iters, k)
    run = _bench_run(args, cfg, meter.total_iters, device)
    runner = run.runner

    class Start(Hook):  # before every other hook; its after_train_iter ends the forward
        def before_train_iter(self, runner):
            meter.before_iter(runner.iter, (runner.model, runner.optimizer, runner.data_batch))

        def after_train_iter(self, runner):
            meter.after_forward(runner.iter)

    class End(Hook):  # after the optimizer hook's backward and step
        def after_train_iter(self, runner):
            meter.after_iter(runner.iter)

    runner.register_hook(Start(), 'HIGHEST')
    runner.register_hook(End(), 'LOWEST')
    runner.run(run.data_loaders, run.workflow)
    return dict(meter.result(), optimizer_hook=run.optimizer_config['type'],
                samples_per_gpu=cfg.data.samples_per_gpu, cumulative_iters=k)


def _timm():
    try:
        import timm
    except ImportError:
        return None
    return timm


def _backbone(arch, impl, cp, img_size):
    """``(module, features(x) -> last feature map)`` of one backbone implementation; ``cp`` is
    '' (plain), 'cp' (the implementation's checkpointing) or 'selective' (ckptzoo's)."""
    import torch.nn as nn
    if impl == 'ckptzoo':
        from ckptzoo.models.backbones import DenseNet, ResNet, SwinTransformer
        if arch == 'resnet50':
            model = ResNet(depth=50, out_indices=(3,), norm_eval=False)
        elif arch == 'densenet121':
            model = DenseNet(arch='121', out_indices=(3,))
        else:
            model = SwinTransformer(arch='tiny', out_indices=(3,), drop_path_rate=0.0)
        if cp.startswith('plan='):
            model.set_checkpoint_plan({'*': None, **PEER_PLANS[cp[5:]][1][arch]})
        else:
            model.set_checkpoint_plan({'*': {'': None, 'cp': 'full'}.get(cp, cp)})
        if hasattr(model, 'init_weights'):
            model.init_weights()
        return model, lambda x: model(x)[-1]
    if impl == 'torchvision' and arch == 'densenet121' and cp == 'selective':
        return _whole_model_selective(*_backbone(arch, impl, '', img_size))
    if cp == 'selective' or cp.startswith('plan='):
        raise ValueError(f'selective checkpointing is ckptzoo\'s, not {impl}\'s')
    cp = cp == 'cp'
    if impl == 'torchvision':
        import torchvision
        if arch == 'resnet50':
            model = torchvision.models.resnet50(weights=None)
            body = nn.Sequential(*list(model.children())[:-2])
            return model, body
        if arch == 'densenet121':
            model = torchvision.models.densenet121(weights=None, memory_efficient=cp)
            return model, lambda x: nn.functional.relu(model.features(x))
        from torchvision.models.swin_transformer import SwinTransformer as TVSwin
        model = TVSwin(patch_size=[4, 4], embed_dim=96, depths=[2, 2, 6, 2],  # swin_t's
                       num_heads=[3, 6, 12, 24], window_size=[7, 7], stochastic_depth_prob=0.0)
        return model, lambda x: model.norm(model.features(x))
    timm = _timm()
    if timm is None:
        raise ImportError('timm is not installed (pip install timm==1.0.31, or .[bench])')
    name = {'resnet50': 'resnet50', 'densenet121': 'densenet121',
            'swin_t': 'swin_tiny_patch4_window7_224'}[arch]
    kwargs = dict(img_size=img_size, drop_path_rate=0.0) if arch == 'swin_t' else {}
    model = timm.create_model(name, pretrained=False, **kwargs)
    model.set_grad_checkpointing(cp)
    return model, model.forward_features


def _whole_model_selective(model, features):
    """``features`` under one non-reentrant checkpoint with ckptzoo's selective policy (keep
    convolution / matmul outputs, recompute the rest)."""
    from torch.utils import checkpoint as torch_cp

    from ckptzoo.models.checkpointing.functional import selective_context
    return model, lambda x: torch_cp.checkpoint(features, x, use_reentrant=False,
                                                context_fn=selective_context)


def run_peer(args, arch, impl, cp):
    import torch
    from ckptzoo.apis import set_random_seed
    torch.backends.cudnn.benchmark = False
    set_random_seed(args.seed)
    device = _device(args)
    if arch == 'retinanet':
        return _run_tv_retinanet(args, device, impl == 'torchvision-default')
    model, features = _backbone(arch, impl, cp, args.peer_img_size)
    model = model.to(device).train()
    x = torch.randn(args.peer_batch, 3, args.peer_img_size, args.peer_img_size, device=device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=1e-4)
    meter = Meter(device, args.warmup, args.iters)
    for i in range(meter.total_iters):
        meter.before_iter(i, (model, optimizer, x))
        loss = features(x).float().mean()
        meter.after_forward(i)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        del loss
        meter.after_iter(i)
    return meter.result()


def _run_tv_retinanet(args, device, default=False):
    """torchvision's RetinaNet R50-FPN with random weights, on the batches of the config's
    pipeline; its transform does not resize (min/max size = the image size) nor re-normalise.

    Built as the config (mmdet's RetinaNet R50-FPN): ``BatchNorm2d`` kept in eval mode with
    trained affine parameters (``norm_eval=True``, ``requires_grad=True``), conv1 and layer1
    frozen (``frozen_stages=1``), P6 from C5 (``add_extra_convs='on_input'``). With
    ``default``, as ``retinanet_resnet50_fpn`` builds it: ``FrozenBatchNorm2d`` everywhere,
    conv1 and layer1 frozen, P6 from P5."""
    import torch.nn as nn
    from torchvision.models.detection import RetinaNet
    from torchvision.models.detection.backbone_utils import resnet_fpn_backbone
    from torchvision.ops.feature_pyramid_network import LastLevelP6P7
    from torchvision.ops.misc import FrozenBatchNorm2d

    from ckptzoo.registry import build_optimizer
    cfg = _load_config(args)
    _variant_cfg(cfg, 'base', args.batch)
    loader = _build_loader(args, cfg, args.batch)
    w, h = args.img_size if len(args.img_size) == 2 else args.img_size * 2
    backbone = resnet_fpn_backbone(backbone_name='resnet50', weights=None,
                                   norm_layer=FrozenBatchNorm2d if default else nn.BatchNorm2d,
                                   trainable_layers=3, returned_layers=[2, 3, 4],
                                   extra_blocks=LastLevelP6P7(256 if default else 2048, 256))
    model = RetinaNet(backbone, num_classes=cfg.model.bbox_head.num_classes,
                      min_size=min(w, h), max_size=max(w, h), image_mean=[0., 0., 0.],
                      image_std=[1., 1., 1.]).to(device).train()
    for m in model.modules():  # norm_eval
        if isinstance(m, nn.BatchNorm2d):
            m.eval()
    optimizer = build_optimizer(model, cfg.optimizer)
    meter = Meter(device, args.warmup, args.iters)
    batches = iter(_cycle(loader))
    for i in range(meter.total_iters):
        batch = next(batches)
        images = list(batch['img'].to(device))
        targets = [dict(boxes=b.to(device), labels=lab.to(device))
                   for b, lab in zip(batch['gt_bboxes'], batch['gt_labels'])]
        meter.before_iter(i, (model, optimizer, images, targets))
        loss = sum(model(images, targets).values())
        meter.after_forward(i)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        del loss
        meter.after_iter(i)
    return meter.result()


def _cycle(loader):
    while True:
        yield from loader


def run_job(args):
    """The internal ``--job`` entry: run one variant or peer, write its JSON result."""
    try:
        if args.threads:
            import torch
            torch.set_num_threads(args.threads)
        if args.job == os.environ.get('CKPTZOO_BENCH_FAIL'):  # tests of the failure path
            raise RuntimeError('injected failure (CKPTZOO_BENCH_FAIL)')
        if args.job.startswith('peer:'):
            arch, impl, cp = args.job.split(':')[1:]
            result = run_peer(args, arch, impl, cp)
        else:
            result = run_variant(args, args.job)
        result['ok'] = True
    except Exception as exc:  # reported as a FAILED row by the parent
        traceback.print_exc()
        result = dict(ok=False, error=f'{type(exc).__name__}: {exc}'.splitlines()[0][:200])
    with open(args.result, 'w', encoding='utf-8') as f:
        json.dump(result, f)
    return 0 if result['ok'] else 1


# ------------------------------------------------------------------------------------------
# the driver
# ------------------------------------------------------------------------------------------
def _child_args(args):
    """The arguments every job process gets (the job itself is added by ``_spawn``)."""
    out = [args.config, '--img-size', *map(str, args.img_size), '--batch', str(args.batch),
           '--iters', str(args.iters), '--warmup', str(args.warmup),
           '--peer-batch', str(args.peer_batch), '--peer-img-size', str(args.peer_img_size),
           '--data-root', args.data_root, '--seed', str(args.seed)]
    out += ['--threads', str(args.threads)] if args.threads else []
    return out + (['--device', args.device] if args.device else [])


def _spawn(job, argv, label, index, total):
    print(f'[{index}/{total}] {label} ...', file=sys.stderr, flush=True)
    fd, path = tempfile.mkstemp(suffix='.json', prefix='ckptzoo_bench_')
    os.close(fd)
    start = time.perf_counter()
    try:
        proc = subprocess.run([sys.executable, osp.abspath(__file__)] + argv +
                              ['--job', job, '--result', path],
                              capture_output=True, text=True,
                              env=dict(os.environ, PYTHONPATH=ROOT + os.pathsep +
                                       os.environ.get('PYTHONPATH', '')))
        try:
            with open(path, encoding='utf-8') as f:
                result = json.load(f)
        except (OSError, ValueError):
            lines = [ln for ln in (proc.stderr or '').strip().splitlines() if ln.strip()]
            reason = lines[-1] if lines else f'exit status {proc.returncode}'
            result = dict(ok=False, error=f'process died: {reason}'[:200])
    finally:
        os.unlink(path)
    wall = time.perf_counter() - start
    if result['ok']:
        print(f'[{index}/{total}] {label}: {_ms(result["times"])} ms/step, '
              f'{_memory_line(result)} ({wall:.0f} s)', file=sys.stderr, flush=True)
    else:
        print(f'[{index}/{total}] {label}: FAILED: {result["error"]}', file=sys.stderr,
              flush=True)
        if os.environ.get('CKPTZOO_BENCH_VERBOSE'):
            print(proc.stderr, file=sys.stderr)
    return result


def _ms(times):
    return f'{statistics.median(times) * 1e3:.0f}'


def _merge(rounds):
    """One job's results over its rounds: memory from the first (it is deterministic), the
    times of every step of every round, and per round (for paired ratios)."""
    failed = [r for r in rounds if not r['ok']]
    if failed:
        return failed[0]
    return dict(rounds[0], times=[t for r in rounds for t in r['times']],
                round_times=[r['times'] for r in rounds])


def _time_ratio(r, ref):
    """The median of per-step ratios, step ``i`` of round ``k`` against the reference's step
    ``i`` of round ``k`` (jobs of one round ran one after the other); with steps that do not
    pair up, the ratio of the medians."""
    if not (r and r.get('ok') and ref and ref.get('ok')):
        return ''
    a, b = r.get('round_times'), ref.get('round_times')
    if a and b and [len(x) for x in a] == [len(x) for x in b]:
        return f'{statistics.median(x / y for ra, rb in zip(a, b) for x, y in zip(ra, rb)):.2f}×'
    return _ratio(_med(r), _med(ref))


def _memory_line(r):
    if r.get('max_allocated') is not None:
        return (f'max allocated {r["max_allocated"] / MIB:.0f} MiB, '
                f'max reserved {r["max_reserved"] / MIB:.0f} MiB')
    return f'peak live tensors {r["peak_live"] / MIB:.0f} MiB'


def _ratio(value, ref):
    if value is None or not ref:
        return ''
    return f'{value / ref:.2f}×'


def _time_cell(r):
    t = r['times']
    return f'{statistics.median(t) * 1e3:.0f} ({min(t) * 1e3:.0f}–{max(t) * 1e3:.0f})'


def _med(r):
    return statistics.median(r['times']) if r.get('ok') else None


def _mem_keys(cuda):
    """(result key, column title) of the memory columns."""
    if cuda:
        return [('max_allocated', 'max allocated'), ('max_reserved', 'max reserved'),
                ('saved', 'saved for backward')]
    return [('peak_live', 'peak live tensors'), ('saved', 'saved for backward'),
            ('held', 'held at forward end')]


def _mib(value):
    return '' if value is None else f'{value / MIB:.1f}'


def variant_table(results, cuda):
    keys = _mem_keys(cuda)
    head = '| variant | ' + ''.join(f'{title} (MiB) | × base | ' for _, title in keys) + \
        'ms / step, median (min–max) | × base |'
    lines = [head, '|' + ' --- |' * (head.count('|') - 1)]
    base = results.get('base') if results.get('base', {}).get('ok') else None
    for name, r in results.items():
        if not r['ok']:
            lines.append(f'| {name} | FAILED: {r["error"]} |' + ' |' * (head.count('|') - 3))
            continue
        cells = [name]
        for key, _ in keys:
            cells += [_mib(r.get(key)), _ratio(r.get(key), base and base.get(key))]
        cells += [_time_cell(r), _time_ratio(r, base)]
        lines.append('| ' + ' | '.join(cells) + ' |')
    return '\n'.join(lines)


def _cp_name(impl, cp, arch=None):
    if impl == 'ckptzoo-config':
        return cp
    if cp.startswith('plan='):
        return PEER_PLANS[cp[5:]][0].format(
            blocks='dense layers' if arch == 'densenet121' else 'blocks')
    if impl == 'torchvision' and cp == 'selective':
        return "'selective' policy, whole model in one checkpoint"
    return {'': '—', 'selective': "'selective'"}.get(cp) or CP_NAMES[impl]


def peer_rows(variants, peers):
    """``(model, implementation, checkpointing, result)`` rows, the config's own RetinaNet
    variants first, grouped by model."""
    rows = []
    if any(arch == 'retinanet' for arch, _, _ in peers):
        rows += [('retinanet', 'ckptzoo-config', label, variants[name])
                 for name, label in RETINANET_ROWS.items() if name in variants]
    rows += [(arch, impl, cp, r) for (arch, impl, cp), r in peers.items()]
    order = ['retinanet'] + list(BACKBONES)
    rows.sort(key=lambda row: order.index(row[0]))
    return rows


def peer_table(variants, peers, cuda):
    keys = [k for k in _mem_keys(cuda) if k[0] != 'max_reserved']
    head = '| model | implementation | checkpointing | ' + \
        ''.join(f'{title} (MiB) | × own plain | ' for _, title in keys) + \
        'ms / step, median (min–max) | × own plain | × torchvision plain |'
    lines = [head, '|' + ' --- |' * (head.count('|') - 1)]
    rows = peer_rows(variants, peers)

    def find(arch, impl, cp):
        for a, i, c, r in rows:
            if (a, i, c) == (arch, impl, cp) and r.get('ok'):
                return r
        return None

    for arch, impl, cp, r in rows:
        label = 'RetinaNet R50-FPN' if arch == 'retinanet' else arch
        impl_name = 'ckptzoo' if impl == 'ckptzoo-config' else impl
        if not r.get('ok'):
            lines.append(f'| {label} | {impl_name} | {_cp_name(impl, cp, arch)} | FAILED: '
                         f'{r["error"]} |' + ' |' * (head.count('|') - 5))
            continue
        plain = find(arch, impl, '—' if impl == 'ckptzoo-config' else '')
        tv = find(arch, 'torchvision', '')
        cells = [label, impl_name, _cp_name(impl, cp, arch)]
        for key, _ in keys:
            cells += [_mib(r.get(key)), _ratio(r.get(key), plain and plain.get(key))]
        cells += [_time_cell(r), _time_ratio(r, plain), _time_ratio(r, tv)]
        lines.append('| ' + ' | '.join(cells) + ' |')
    return '\n'.join(lines)


def _device_name(cuda, threads=None):
    import torch
    if cuda:
        return f'GPU: {torch.cuda.get_device_name(0)}'
    name = platform.processor() or platform.machine()
    try:
        with open('/proc/cpuinfo', encoding='utf-8') as f:
            for line in f:
                if line.startswith('model name'):
                    name = line.split(':', 1)[1].strip()
                    break
    except OSError:
        pass
    return f'CPU: {name}, {os.cpu_count()} logical cores, ' \
        f'{threads or torch.get_num_threads()} torch threads'


COLOURS = {'ckptzoo': 'tab:blue', 'ckptzoo-config': 'tab:blue', 'torchvision': 'tab:orange',
           'torchvision-default': 'tab:red', 'timm': 'tab:green'}


def _chart(path, title, labels, memory, mem_label, times, colours=None, groups=None):
    """Two bar charts (memory, time); ``groups`` (one per bar) leave a gap between models."""
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    xs, x = [], 0.0
    for i in range(len(labels)):
        if i and groups and groups[i] != groups[i - 1]:
            x += 0.8
        xs.append(x)
        x += 1.0
    fig, axes = plt.subplots(1, 2, figsize=(max(8, 0.55 * len(labels) + 4), 5))
    for ax, values, ylabel in ((axes[0], memory, f'{mem_label} (MiB)'),
                               (axes[1], times, 'ms / step (median)')):
        ax.bar(xs, [v if v is not None else 0 for v in values],
               color=colours or 'tab:blue')
        for x, v in zip(xs, values):
            ax.text(x, v or 0, 'FAILED' if v is None else f'{v:.0f}', ha='center',
                    va='bottom', fontsize=7)
        ax.set_xticks(xs)
        ax.set_xticklabels(labels, rotation=60, ha='right', fontsize=7)
        ax.set_ylabel(ylabel)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def peers_chart(path, variants, peers, mem_key, mem_label):
    """ckptzoo's bars (blue) next to torchvision's and timm's, grouped by model."""
    rows = peer_rows(variants, peers)
    labels = [f'{arch} {"ckptzoo" if impl == "ckptzoo-config" else impl} '
              f'{_cp_name(impl, cp, arch)}'.replace(' —', '') for arch, impl, cp, _ in rows]
    _chart(path, 'ckptzoo (blue) and its peers', labels,
           [r[mem_key] / MIB if r.get('ok') else None for *_, r in rows], mem_label,
           [_med(r) * 1e3 if r.get('ok') else None for *_, r in rows],
           colours=[COLOURS[impl] for _, impl, _, _ in rows], groups=[a for a, *_ in rows])


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    if args.job:
        return run_job(args)
    import torch
    cuda = (args.device or ('cuda' if torch.cuda.is_available() else 'cpu')) == 'cuda'
    child = _child_args(args)
    command = 'python tools/benchmark.py ' + ' '.join(argv)
    size = 'x'.join(map(str, args.img_size if len(args.img_size) == 2 else args.img_size * 2))
    out = [f'command: `{command}`', '',
           f'device: {_device_name(cuda, args.threads)}; torch {torch.__version__}', '',
           f'config `{args.config}`, generated VOC data resized to {size} (W×H), batch '
           f'{args.batch} images per optimizer step, {args.warmup} warm-up + {args.iters} timed '
           'steps, then one probe step' +
           (f', every job {args.rounds} times round-robin (times: all steps of all rounds; '
            '× ratios: median of per-step ratios within each round)' if args.rounds > 1
            else '') + '. Memory: ' +
           ('`torch.cuda.max_memory_allocated` / `max_memory_reserved` over the timed steps'
            if cuda else 'exact peak of live tensor storage (parameters, gradients, '
            'optimizer state, batch, activations; `LiveTensorTracker`) in the probe step') +
           '; saved for backward: bytes autograd keeps from the forward '
           '(`SavedTensorCounter`, parameters left out)' +
           ('' if cuda else '; held at forward end: live tensor bytes when the forward ends, '
            'less those that existed before the step (the measure for selective '
            'checkpointing, which keeps its tensors outside saved-tensor hooks)') + '.', '']
    print('\n'.join(out[:1]), flush=True)

    peers = []
    for p in PEERS if args.peers else ():
        if not args.peer_only or p[0] in args.peer_only:
            peers.append(p)
            if p[1:] == ('ckptzoo', 'selective'):
                peers += [(p[0], 'ckptzoo', f'plan={name}') for name in args.peer_plans
                          if p[0] in PEER_PLANS[name][1]]
    have_timm = _timm() is not None
    runs, peer_results = [(name, name, name) for name in args.variants], {}
    for arch, impl, cp in peers:
        if impl == 'timm' and not have_timm:
            peer_results[(arch, impl, cp)] = dict(
                ok=False, error='timm is not installed: pip install timm==1.0.31 (or .[bench])')
            continue
        label = f'{arch} {impl}' + (f' {_cp_name(impl, cp, arch)}' if cp else '')
        runs.append(((arch, impl, cp), f'peer:{arch}:{impl}:{cp}', label))
    # round-robin: every job once per round, so slow spells of a shared machine spread over all
    results, index, total = {key: [] for key, _, _ in runs}, 0, len(runs) * args.rounds
    for k in range(args.rounds):
        for key, job, label in runs:
            index += 1
            suffix = f' (round {k + 1}/{args.rounds})' if args.rounds > 1 else ''
            results[key].append(_spawn(job, child, label + suffix, index, total))
    variants = {name: _merge(results[name]) for name in args.variants}
    peer_results = {p: peer_results.get(p) or _merge(results[p]) for p in peers}

    os.makedirs(args.out_dir, exist_ok=True)
    text = out[1:] + ['## Variants', '', variant_table(variants, cuda), '']
    mem_key = 'max_allocated' if cuda else 'peak_live'
    mem_label = 'max allocated' if cuda else 'peak live tensors'
    charts = [osp.join(args.out_dir, 'benchmark.png')]
    _chart(charts[0], f'{osp.basename(args.config)} ({size}, batch {args.batch})',
           list(variants), [r[mem_key] / MIB if r['ok'] else None for r in variants.values()],
           mem_label, [_med(r) * 1e3 if r['ok'] else None for r in variants.values()])
    if peers:
        text += ['## Peers', '',
                 f'RetinaNet: the same batches as above. Backbones: random input of '
                 f'{args.peer_batch}×3×{args.peer_img_size}×{args.peer_img_size}, loss = mean '
                 'of the last feature map, SGD step; ImageNet-style init, no pretrained weights. '
                 'RetinaNet implementations: ckptzoo = the config and its variants above; '
                 'torchvision = built as the config (BatchNorm in eval mode with trained affine '
                 'parameters from layer2 on, conv1 + layer1 frozen, P6 from C5); '
                 'torchvision-default = as `retinanet_resnet50_fpn` builds it '
                 '(FrozenBatchNorm2d, P6 from P5), to set beside ckptzoo\'s frozen_bn.',
                 '', peer_table(variants, peer_results, cuda), '']
        charts.append(osp.join(args.out_dir, 'benchmark_peers.png'))
        peers_chart(charts[1], variants, peer_results, mem_key, mem_label)
    text += [f'charts: {", ".join(charts)}']
    report = '\n'.join(text)
    print(report, flush=True)
    with open(osp.join(args.out_dir, 'benchmark.md'), 'w', encoding='utf-8') as f:
        f.write(out[0] + '\n\n' + report + '\n')
    if 'base' in variants:
        return 0 if variants['base']['ok'] else 1
    return 0 if any(r['ok'] for r in variants.values()) else 1


if __name__ == '__main__':
    sys.exit(main())
