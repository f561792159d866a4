"""Peers on the same workloads: torchvision's RetinaNet, and ckptzoo's, torchvision's and timm's
ResNet-50 / DenseNet-121 / Swin-T, each with its own checkpointing, in a plain PyTorch loop.

timm is optional (``pip install .[bench]``); its rows say so when it is missing.
"""
from .synthetic import voc_dataset
from .variants import Variant, load_config, setup_job, variant_cfg

def import_timm():
    """The timm module, or None when it is not installed."""
    try:
        import timm
    except ImportError:
        return None
    return timm


def backbone(arch, impl, cp, img_size, plan=None):
    """``(module, features(x) -> last feature map)`` of one backbone implementation; ``cp`` is
    '' (plain), 'cp' (the implementation's checkpointing), 'selective' (ckptzoo's) or
    'plan=NAME' (ckptzoo's, ``plan`` on units that start plain)."""
    import torch.nn as nn
    if impl == 'ckptzoo':
        from ckptzoo.models.backbones import DenseNet, ResNet, SwinTransformer
        if arch == 'resnet50':
            model = ResNet(depth=50, out_indices=(3,), norm_eval=False)
        elif arch == 'densenet121':
            model = DenseNet(arch='121', out_indices=(3,))
        else:
            # torchvision's semantics (its last 7x7 stage unshifted), like the peers'
            model = SwinTransformer(arch='tiny', out_indices=(3,), drop_path_rate=0.0,
                                    convert_weights='torchvision')
        if cp.startswith('plan='):
            model.set_checkpoint_plan({'*': None, **plan})
        else:
            model.set_checkpoint_plan({'*': {'': None, 'cp': 'full'}.get(cp, cp)})
        if hasattr(model, 'init_weights'):
            model.init_weights()
        return model, lambda x: model(x)[-1]
    if impl == 'torchvision' and arch == 'densenet121' and cp == 'selective':
        return _whole_model_selective(*backbone(arch, impl, '', img_size))
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
    timm = import_timm()
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


def train_loop(meter, model, optimizer, batches, loss_fn):
    """A peer's training: ``meter.total_iters`` plain PyTorch steps, ``inputs =
    next(batches)``, ``loss_fn(*inputs).backward()``, ``optimizer.step()``; the meter's
    result."""
    for i in range(meter.total_iters):
        inputs = next(batches)
        meter.before_iter(i, (model, optimizer, *inputs))
        loss = loss_fn(*inputs)
        meter.after_forward(i)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        del loss
        meter.after_iter(i)
    return meter.result()


def run_peer(args, arch, impl, cp, plan=None):
    """One peer job: a backbone on random input (loss = mean of the last feature map, SGD), or
    torchvision's RetinaNet on the config's batches."""
    import itertools

    import torch

    from ckptzoo.memory import StepMeter
    device = setup_job(args)
    if arch == 'retinanet':
        return run_tv_retinanet(args, device, impl == 'torchvision-default')
    model, features = backbone(arch, impl, cp, args.peer_img_size, plan)
    model = model.to(device).train()
    x = torch.randn(args.peer_batch, 3, args.peer_img_size, args.peer_img_size, device=device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=1e-4)
    meter = StepMeter(device, args.warmup, args.iters)
    return train_loop(meter, model, optimizer, itertools.repeat((x,)),
                      lambda x: features(x).float().mean())


def run_tv_retinanet(args, device, default=False):
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

    from ckptzoo.datasets import build_dataloader, build_dataset
    from ckptzoo.memory import StepMeter
    from ckptzoo.registry import build_optimizer
    cfg = load_config(args)
    variant_cfg(cfg, Variant(), args.batch)
    loader = build_dataloader(build_dataset(voc_dataset(cfg, args.data_root, args.img_size)), args.batch, 0, num_gpus=1,
                              dist=False, seed=args.seed, shuffle=True)
    w, h = args.img_size if len(args.img_size) == 2 else args.img_size * 2
    body = resnet_fpn_backbone(backbone_name='resnet50', weights=None,
                               norm_layer=FrozenBatchNorm2d if default else nn.BatchNorm2d,
                               trainable_layers=3, returned_layers=[2, 3, 4],
                               extra_blocks=LastLevelP6P7(256 if default else 2048, 256))
    model = RetinaNet(body, num_classes=cfg.model.bbox_head.num_classes,
                      min_size=min(w, h), max_size=max(w, h), image_mean=[0., 0., 0.],
                      image_std=[1., 1., 1.]).to(device).train()
    for m in model.modules():  # norm_eval
        if isinstance(m, nn.BatchNorm2d):
            m.eval()
    optimizer = build_optimizer(model, cfg.optimizer)

    def batches():
        while True:
            for batch in loader:
                images = list(batch['img'].to(device))
                targets = [dict(boxes=b.to(device), labels=lab.to(device))
                           for b, lab in zip(batch['gt_bboxes'], batch['gt_labels'])]
                yield images, targets

    meter = StepMeter(device, args.warmup, args.iters)
    return train_loop(meter, model, optimizer, batches(),
                      lambda images, targets: sum(model(images, targets).values()))
