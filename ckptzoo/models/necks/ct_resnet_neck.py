"""mmdet 2.x ``CTResNetNeck``, CenterNet's neck (Zhou et al. 2019): on the last backbone output,
per stage a 3x3 ConvModule (a modulated deformable conv, ``DCNv2``, with ``use_dcn``) and a
stride-2 transposed-conv ConvModule upsampling by 2, both with BN and ReLU. One output.

Keys: ``deconv_layers.{2i}.conv.*`` / ``.bn.*`` (the 3x3 conv of stage i) and
``deconv_layers.{2i+1}.conv.*`` / ``.bn.*`` (its upsampling).

Checkpoint units, one chain: ``stage{i}`` (both ConvModules of a stage).
"""
import math

import torch.nn as nn

from ...registry import MODELS
from ...runner.fp16 import auto_fp16
from ..checkpointing import CheckpointOwnerMixin, CheckpointUnit, unit_step
from ..utils import CONV_LAYERS, ConvModule, apply_init_cfg
from ..utils.pretrained import load_pretrained

__all__ = ['CTResNetNeck']


@MODELS.register_module()
class CTResNetNeck(CheckpointOwnerMixin, nn.Module):
    """Args (mmdet's):
        in_channel (int): channels of the last backbone output.
        num_deconv_filters (tuple[int]): channels of each stage.
        num_deconv_kernels (tuple[int]): kernel of each stage's transposed conv (padding 1).
        use_dcn (bool): the 3x3 convs are ``DCNv2`` (mmdet's default True).
        init_cfg (dict | None): applied after mmdet's own initialisation.
        with_cp (bool): ``'full'`` on every unit (not an mmdet argument; default False).
        cp_use_reentrant (bool): torch's reentrant checkpoint.
    """

    def __init__(self, in_channel, num_deconv_filters, num_deconv_kernels, use_dcn=True,
                 init_cfg=None, with_cp=False, cp_use_reentrant=False):
        super().__init__()
        if not isinstance(with_cp, bool):
            raise TypeError(f'CTResNetNeck with_cp must be a bool, got {with_cp!r}')
        if len(num_deconv_filters) != len(num_deconv_kernels):
            raise ValueError(f'CTResNetNeck num_deconv_filters and num_deconv_kernels must be '
                             f'of the same length, got {num_deconv_filters!r} and '
                             f'{num_deconv_kernels!r}')
        if use_dcn and 'DCNv2' not in CONV_LAYERS:
            raise NotImplementedError(
                "CTResNetNeck use_dcn=True needs the modulated deformable conv ('DCNv2'), "
                'which this build does not have yet; use use_dcn=False')
        self.fp16_enabled = False
        self.use_dcn = use_dcn
        self.in_channel = in_channel
        self.init_cfg = init_cfg
        layers = []
        for filters, kernel in zip(num_deconv_filters, num_deconv_kernels):
            layers.append(ConvModule(self.in_channel, filters, 3, padding=1,
                                     conv_cfg=dict(type='DCNv2') if use_dcn else None,
                                     norm_cfg=dict(type='BN')))
            layers.append(ConvModule(filters, filters, kernel, stride=2, padding=1,
                                     conv_cfg=dict(type='deconv'), norm_cfg=dict(type='BN')))
            self.in_channel = filters
        self.deconv_layers = nn.Sequential(*layers)
        self.stage_units = [CheckpointUnit.from_flag(with_cp, cp_use_reentrant)
                            for _ in num_deconv_filters]
        self._init_weights()
        if not (isinstance(init_cfg, dict) and init_cfg.get('type') == 'Pretrained'):
            apply_init_cfg(self, init_cfg)

    def _init_weights(self):
        """mmdet's: a bilinear-upsampling kernel in ``w[c, 0]`` of every transposed conv (as
        mmdet fills it; the other entries keep PyTorch's default), unit BNs, and PyTorch's
        default for the plain convs (without DCN)."""
        for m in self.modules():
            if isinstance(m, nn.ConvTranspose2d):
                m.reset_parameters()
                w = m.weight.data
                f = math.ceil(w.size(2) / 2)
                c = (2 * f - 1 - f % 2) / (2. * f)
                for i in range(w.size(2)):
                    for j in range(w.size(3)):
                        w[0, 0, i, j] = (1 - math.fabs(i / f - c)) * (1 - math.fabs(j / f - c))
                for ch in range(1, w.size(0)):
                    w[ch, 0, :, :] = w[0, 0, :, :]
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.constant_(m.weight, 1)
                nn.init.constant_(m.bias, 0)
            elif not self.use_dcn and isinstance(m, nn.Conv2d):
                m.reset_parameters()

    def init_weights(self):
        """Load a ``Pretrained`` init_cfg; the rest was applied at construction."""
        if isinstance(self.init_cfg, dict) and self.init_cfg.get('type') == 'Pretrained':
            load_pretrained(self, self.init_cfg, type(self).__name__)

    def _stage(self, i):
        return self.deconv_layers[2 * i:2 * i + 2]

    def _checkpoint_steps(self):
        return [[unit_step(f'stage{i}', unit, self._stage(i))
                 for i, unit in enumerate(self.stage_units)]]

    @auto_fp16()
    def forward(self, inputs):
        if not isinstance(inputs, (list, tuple)):
            raise TypeError(f'CTResNetNeck takes a list or tuple of backbone outputs, '
                            f'got {type(inputs).__name__}')
        out, _ = self._run_chain(self._checkpoint_steps()[0], inputs[-1])
        return (out, )
