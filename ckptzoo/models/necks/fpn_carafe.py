"""mmdet 2.x ``FPN_CARAFE`` (Wang et al. 2019): an FPN whose top-down path upsamples with a
chosen layer, CARAFE by default, and whose extra levels are made like backbone levels (a
stride-2 3x3 lateral on the level below, then the same top-down merge and output conv).

Keys: ``lateral_convs.{i}``, ``fpn_convs.{i}`` (ConvModules; the extra levels' after the
backbone levels'), ``upsample_modules.{i}`` (``channel_compressor`` / ``content_encoder`` for
CARAFE, a transposed conv's ``weight`` / ``bias``, ``upsample_conv`` for pixel shuffle).

``upsample_cfg`` types: 'carafe', 'nearest', 'bilinear', 'deconv' and 'pixel_shuffle' (these
two with ``upsample_kernel`` in the dict: mmdet looks for it as an attribute of the dict and
so refuses every such config). ``None`` is refused: mmdet accepts it, then fails to build.

Checkpoint units, one chain: ``laterals`` (every lateral conv; the state: the laterals), then
``level{i}`` top-down (the upsampling of the level above, the addition, the output conv; the
state: the merged level), every output leaving.
"""
from functools import partial

import torch.nn as nn
import torch.nn.functional as F

from ...ops import CARAFEPack
from ...registry import MODELS
from ..checkpointing import ChainStep, CheckpointOwnerMixin, CheckpointUnit
from ..utils import ConvModule, xavier_init
from .nas_fpn import _level_range

__all__ = ['FPN_CARAFE', 'PixelShufflePack']

_UPSAMPLES = ('nearest', 'bilinear', 'deconv', 'pixel_shuffle', 'carafe')
_ORDERS = (('conv', 'norm', 'act'), ('act', 'conv', 'norm'))


class PixelShufflePack(nn.Module):
    """mmcv's pixel-shuffle upsampler: a conv to ``out * s**2`` channels, then shuffle."""

    def __init__(self, in_channels, out_channels, scale_factor, upsample_kernel):
        super().__init__()
        self.in_channels = in_channels
        self.out_channels = out_channels
        self.scale_factor = scale_factor
        self.upsample_kernel = upsample_kernel
        self.upsample_conv = nn.Conv2d(in_channels, out_channels * scale_factor**2,
                                       upsample_kernel, padding=(upsample_kernel - 1) // 2)
        xavier_init(self.upsample_conv, distribution='uniform')

    def forward(self, x):
        return F.pixel_shuffle(self.upsample_conv(x), self.scale_factor)


@MODELS.register_module()
class FPN_CARAFE(CheckpointOwnerMixin, nn.Module):
    """Args (mmdet's):
        in_channels (list[int]), out_channels (int), num_outs (int).
        start_level, end_level (int): backbone outputs used.
        norm_cfg, act_cfg (dict | None): of every ConvModule (a conv bias only without norm).
        order (tuple): ('conv', 'norm', 'act') or ('act', 'conv', 'norm').
        upsample_cfg (dict): the upsampling layer, ``type`` and its arguments.
        init_cfg (None): nothing else is allowed (as in mmdet).
        with_cp (bool): ``'full'`` on every unit (not an mmdet argument; default False).
        cp_use_reentrant (bool): torch's reentrant checkpoint.
    """

    def __init__(self, in_channels, out_channels, num_outs, start_level=0, end_level=-1,
                 norm_cfg=None, act_cfg=None, order=('conv', 'norm', 'act'),
                 upsample_cfg=dict(type='carafe', up_kernel=5, up_group=1, encoder_kernel=3,
                                   encoder_dilation=1),
                 init_cfg=None, with_cp=False, cp_use_reentrant=False):
        super().__init__()
        if init_cfg is not None:
            raise ValueError(f'FPN_CARAFE init_cfg must be None (as in mmdet, to keep its '
                             f'initialisation), got {init_cfg!r}')
        if not isinstance(in_channels, list) or not in_channels:
            raise TypeError(f'FPN_CARAFE in_channels must be a non-empty list, '
                            f'got {in_channels!r}')
        if not isinstance(with_cp, bool):
            raise TypeError(f'FPN_CARAFE with_cp must be a bool, got {with_cp!r}')
        if tuple(order) not in _ORDERS:
            raise ValueError(f"FPN_CARAFE order must be ('conv', 'norm', 'act') or ('act', "
                             f"'conv', 'norm'), got {order!r}")
        self.upsample_cfg = dict(upsample_cfg)
        self.upsample = self.upsample_cfg.get('type')
        if self.upsample not in _UPSAMPLES:
            raise ValueError(f'FPN_CARAFE upsample_cfg type must be one of '
                             f'{", ".join(_UPSAMPLES)}, got {self.upsample!r}')
        if self.upsample in ('deconv', 'pixel_shuffle'):
            kernel = self.upsample_cfg.pop('upsample_kernel', None)
            if not (isinstance(kernel, int) and kernel > 0):
                raise ValueError(f'FPN_CARAFE upsample_cfg {self.upsample!r} needs a positive '
                                 f'int upsample_kernel, got {kernel!r}')
            self.upsample_kernel = kernel
        self.in_channels = in_channels
        self.out_channels = out_channels
        self.num_ins = len(in_channels)
        self.num_outs = num_outs
        self.norm_cfg = norm_cfg
        self.act_cfg = act_cfg
        self.with_bias = norm_cfg is None
        self.relu = nn.ReLU(inplace=False)
        self.order = tuple(order)
        self.backbone_end_level = _level_range('FPN_CARAFE', self.num_ins, num_outs,
                                               start_level, end_level)
        self.start_level = start_level
        self.end_level = end_level
        self.init_cfg = init_cfg

        def conv(cin, k, **kw):
            return ConvModule(cin, out_channels, k, norm_cfg=norm_cfg, bias=self.with_bias,
                              act_cfg=act_cfg, inplace=False, order=self.order, **kw)

        self.lateral_convs = nn.ModuleList()
        self.fpn_convs = nn.ModuleList()
        self.upsample_modules = nn.ModuleList()
        for i in range(start_level, self.backbone_end_level):
            self.lateral_convs.append(conv(in_channels[i], 1))
            self.fpn_convs.append(conv(out_channels, 3, padding=1))
            if i != self.backbone_end_level - 1:
                self.upsample_modules.append(self._upsampler())
        for i in range(num_outs - self.backbone_end_level + start_level):
            cin = in_channels[self.backbone_end_level - 1] if i == 0 else out_channels
            self.lateral_convs.append(conv(cin, 3, stride=2, padding=1))
            self.upsample_modules.append(self._upsampler())
            self.fpn_convs.append(conv(out_channels, 3, padding=1))
        self._init_weights()
        self.laterals_unit = CheckpointUnit.from_flag(with_cp, cp_use_reentrant)
        self.level_units = [CheckpointUnit.from_flag(with_cp, cp_use_reentrant)
                            for _ in self.fpn_convs]

    def _upsampler(self):
        cfg = {k: v for k, v in self.upsample_cfg.items() if k != 'type'}
        c = self.out_channels
        try:
            if self.upsample == 'carafe':
                return CARAFEPack(c, 2, **cfg)
            if self.upsample == 'deconv':
                k = self.upsample_kernel
                return nn.ConvTranspose2d(c, c, k, stride=2, padding=(k - 1) // 2,
                                          output_padding=(k - 1) // 2, **cfg)
            if self.upsample == 'pixel_shuffle':
                return PixelShufflePack(c, c, 2, self.upsample_kernel, **cfg)
            return nn.Upsample(scale_factor=2, mode=self.upsample,
                               align_corners=None if self.upsample == 'nearest' else False,
                               **cfg)
        except TypeError as err:
            raise ValueError(f'FPN_CARAFE upsample_cfg {self.upsample!r} got an argument it '
                             f'does not take: {sorted(cfg)} ({err})') from None

    def _init_weights(self):
        """mmdet's: Xavier uniform on every (transposed) conv, then CARAFE's own init."""
        for m in self.modules():
            if isinstance(m, (nn.Conv2d, nn.ConvTranspose2d)):
                xavier_init(m, distribution='uniform')
        for m in self.modules():
            if isinstance(m, CARAFEPack):
                m.init_weights()

    def init_weights(self):
        """Everything was initialised at construction."""

    @staticmethod
    def slice_as(src, dst):
        """``src`` cut to ``dst``'s size (an upsampled odd size is one larger)."""
        if src.size(2) < dst.size(2) or src.size(3) < dst.size(3):
            raise ValueError(f'FPN_CARAFE cannot add a smaller upsampled level '
                             f'{tuple(src.shape)} to {tuple(dst.shape)}')
        return src[:, :, :dst.size(2), :dst.size(3)]

    def tensor_add(self, a, b):
        return a + b if a.size() == b.size() else a + self.slice_as(b, a)

    def _laterals(self, *inputs):
        laterals = []
        used = self.backbone_end_level - self.start_level
        for i, conv in enumerate(self.lateral_convs):
            x = inputs[min(i + self.start_level, len(inputs) - 1)] if i <= used \
                else laterals[-1]
            laterals.append(conv(x))
        return tuple(laterals)

    def _level(self, i, lateral, top=None):
        if top is not None:
            lateral = self.tensor_add(lateral, self.upsample_modules[i](top))
        return lateral, self.fpn_convs[i](lateral)

    def _laterals_step(self, _, *inputs):
        laterals = self.laterals_unit(self._laterals, *inputs, module=self.lateral_convs)
        return (list(laterals), None), None

    def _level_modules(self, i):
        last = i == len(self.fpn_convs) - 1
        return [self.fpn_convs[i]] + ([] if last else [self.upsample_modules[i]])

    def _level_step(self, i, state):
        laterals, top = state
        args = (laterals[i], ) if top is None else (laterals[i], top)
        merged, out = self.level_units[i](partial(self._level, i), *args,
                                          module=self._level_modules(i))
        return (laterals[:i], merged), out

    def _checkpoint_steps(self, inputs=None):
        steps = [ChainStep('laterals', self.laterals_unit, self._laterals_step,
                           self.lateral_convs, () if inputs is None else tuple(inputs))]
        steps += [ChainStep(f'level{i}', self.level_units[i], partial(self._level_step, i),
                            self._level_modules(i), leaves=True)
                  for i in range(len(self.fpn_convs) - 1, -1, -1)]
        return [steps]

    def forward(self, inputs):
        if len(inputs) != len(self.in_channels):
            raise ValueError(f'FPN_CARAFE expects {len(self.in_channels)} inputs '
                             f'(in_channels), got {len(inputs)}')
        _, outs = self._run_chain(self._checkpoint_steps(inputs)[0], None)
        return tuple(o for o in outs[::-1] if o is not None)
