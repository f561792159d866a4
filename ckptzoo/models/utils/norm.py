"""mmcv's ``build_norm_layer``: ``norm_cfg = dict(type='BN', requires_grad=True)`` to a layer.

The returned name (``bn1``, ``gn1``, ...) is the attribute name mmcv/mmdet give the layer, which
keeps state-dict keys equal to theirs (and, for BN, to torchvision's).

**Frozen BatchNorm keeps nothing.** A BN layer in eval mode (``norm_eval=True``, or frozen by
``frozen_stages``) whose affine parameters do not require grad is a fixed per-channel affine
map. ``F.batch_norm`` would still save its whole input for backward; the BN classes here then
run ``F.batch_norm`` in a function of their own whose backward needs only the per-channel
``scale`` (``weight / sqrt(running_var + eps)``), the one thing it saves. The output is
``F.batch_norm``'s to the bit, as mmcv's (torchvision's ``FrozenBatchNorm2d`` computes
``x * scale + shift``, which rounds differently). It needs no config key: mmdet's
``norm_cfg=dict(type='BN', requires_grad=False)`` with ``norm_eval=True`` (detectron2's and
torchvision's detection default) turns it on. Keys and buffers are BatchNorm's.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

__all__ = ['NORM_LAYERS', 'build_norm_layer', 'FrozenAwareBatchNormMixin', 'BatchNorm1d',
           'BatchNorm2d', 'BatchNorm3d', 'SyncBatchNorm', 'LayerNorm2d']


class _FrozenBatchNorm(torch.autograd.Function):
    """Eval-mode ``F.batch_norm`` (mmcv's numbers); backward keeps only the scale."""

    @staticmethod
    def forward(ctx, x, mean, var, weight, bias, eps):
        ctx.dim = x.dim()
        ctx.save_for_backward(weight * (var + eps).rsqrt())
        return F.batch_norm(x, mean, var, weight, bias, False, 0.0, eps)

    @staticmethod
    def backward(ctx, grad):
        scale, = ctx.saved_tensors
        shape = (1, -1) + (1, ) * (ctx.dim - 2)
        return grad * scale.reshape(shape).to(grad.dtype), None, None, None, None, None


class FrozenAwareBatchNormMixin:
    """BatchNorm that, frozen (eval, affine not trained), saves no activation for backward."""

    def is_frozen(self):
        """True when the layer is a fixed affine map that needs no input in backward."""
        return (not self.training and self.track_running_stats and self.running_mean is not None
                and self.affine and not self.weight.requires_grad
                and not self.bias.requires_grad)

    def forward(self, x):
        if not self.is_frozen():
            return super().forward(x)
        self._check_input_dim(x)
        return _FrozenBatchNorm.apply(x, self.running_mean, self.running_var, self.weight,
                                      self.bias, self.eps)


class BatchNorm1d(FrozenAwareBatchNormMixin, nn.BatchNorm1d):
    pass


class BatchNorm2d(FrozenAwareBatchNormMixin, nn.BatchNorm2d):
    pass


class BatchNorm3d(FrozenAwareBatchNormMixin, nn.BatchNorm3d):
    pass


class SyncBatchNorm(FrozenAwareBatchNormMixin, nn.SyncBatchNorm):
    pass


class LayerNorm2d(nn.LayerNorm):
    """LayerNorm over the channels of an NCHW tensor (mmcls's ``LN2d``; keys ``weight`` /
    ``bias`` of shape ``[C]``): normalises channels-last and returns an NCHW view."""

    def forward(self, x):
        if x.dim() != 4:
            raise ValueError(f'LayerNorm2d takes an NCHW tensor, got shape {tuple(x.shape)}')
        return super().forward(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)


# type -> (layer class, name prefix)
NORM_LAYERS = {
    'BN': (BatchNorm2d, 'bn'),
    'BN1d': (BatchNorm1d, 'bn'),
    'BN2d': (BatchNorm2d, 'bn'),
    'BN3d': (BatchNorm3d, 'bn'),
    'SyncBN': (SyncBatchNorm, 'bn'),
    # mmcv's ``mmcv.ops.SyncBatchNorm``: BN's keys and numbers (synchronised across processes
    # as torch's, which it replaces here: ckptzoo compiles no mmcv op)
    'MMSyncBN': (SyncBatchNorm, 'bn'),
    'GN': (nn.GroupNorm, 'gn'),
    'LN': (nn.LayerNorm, 'ln'),
    'LN2d': (LayerNorm2d, 'ln'),
    'IN': (nn.InstanceNorm2d, 'in'),
}


def _mmsyncbn_args(cfg):
    """mmcv ``MMSyncBN``'s arguments as torch ``SyncBatchNorm``'s: ``group`` is the process
    group; ``stats_mode`` ``'default'`` only (``'N'`` weighs the processes by batch size)."""
    stats_mode = cfg.pop('stats_mode', 'default')
    if stats_mode != 'default':
        raise NotImplementedError(f"MMSyncBN stats_mode={stats_mode!r} is not supported, only "
                                  f"'default'")
    if 'group' in cfg:
        cfg['process_group'] = cfg.pop('group')
    return cfg


def build_norm_layer(cfg, num_features, postfix=''):
    """Returns ``(name, layer)``; ``cfg`` as in mmcv: type, requires_grad, eps, momentum, num_groups."""
    if not isinstance(cfg, dict) or 'type' not in cfg:
        raise TypeError(f'norm_cfg must be a dict with a "type" key, got {cfg!r}')
    cfg = dict(cfg)
    norm_type = cfg.pop('type')
    if norm_type not in NORM_LAYERS:
        raise ValueError(f'unknown norm type {norm_type!r}: allowed are {", ".join(NORM_LAYERS)}')
    layer_cls, prefix = NORM_LAYERS[norm_type]
    requires_grad = cfg.pop('requires_grad', True)
    cfg.setdefault('eps', 1e-5)
    if norm_type == 'GN':
        if 'num_groups' not in cfg:
            raise ValueError(f'norm_cfg of type GN needs num_groups, got {cfg!r}')
        layer = layer_cls(num_channels=num_features, **cfg)
    elif norm_type == 'LN':
        layer = layer_cls(num_features, **cfg)
    else:
        if norm_type == 'MMSyncBN':
            cfg = _mmsyncbn_args(cfg)
        layer = layer_cls(num_features, **cfg)
        if norm_type in ('SyncBN', 'MMSyncBN') and hasattr(layer, '_specify_ddp_gpu_num'):
            layer._specify_ddp_gpu_num(1)
    for param in layer.parameters():
        param.requires_grad = requires_grad
    return f'{prefix}{postfix}', layer
