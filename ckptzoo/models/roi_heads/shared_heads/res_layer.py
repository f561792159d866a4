"""mmdet 2.x shared head ``ResLayer`` of C4 models: ResNet stage ``stage`` (the 4th by
default) run over the RoI features, before the box (and mask) head.

Keys ``layer{stage + 1}.{j}.*`` as mmdet's, so a ResNet checkpoint's stage loads into it
(``init_cfg=dict(type='Pretrained', checkpoint=...)``, non-strict). Its blocks are checkpoint
units that the RoI head owning it describes in its chain (``shared_head.layer4.{j}``), since
the RoI head runs them between its extractor and its heads; :meth:`chain_steps` lists them.
"""
import warnings

import torch.nn as nn
from torch.nn.modules.batchnorm import _BatchNorm

from ....registry import MODELS
from ....runner.fp16 import auto_fp16
from ...backbones.resnet import ResLayer as _ResLayer
from ...backbones.resnet import ResNet
from ...checkpointing import chain_step
from ...utils.pretrained import check_pretrained_cfg, load_pretrained

__all__ = ['ResLayer']


@MODELS.register_module()
class ResLayer(nn.Module):
    """Args as mmdet 2.x: ``depth`` (50, 101, 152 ... of ResNet), ``stage`` (0-based: 3 is
    ``layer4``), ``stride``, ``dilation``, ``style`` ('pytorch' or 'caffe'), ``norm_cfg``,
    ``norm_eval`` (BatchNorms stay in eval mode in training), ``with_cp`` (``'full'``
    checkpointing of every block; ``set_checkpoint_plan`` on the owner changes it), ``dcn``
    (every block's conv2 a deformable conv, as :class:`ResNet`'s ``dcn``), ``pretrained`` (deprecated: a checkpoint path), ``init_cfg`` (default:
    Kaiming convs, unit norms, as mmdet). ``cp_use_reentrant``: not an mmdet argument."""

    def __init__(self, depth, stage=3, stride=2, dilation=1, style='pytorch',
                 norm_cfg=dict(type='BN', requires_grad=True), norm_eval=True, with_cp=False,
                 dcn=None, pretrained=None, init_cfg=None, cp_use_reentrant=False):
        super().__init__()
        if depth not in ResNet.arch_settings:
            raise ValueError(f'ResLayer depth must be one of {sorted(ResNet.arch_settings)}, '
                             f'got {depth!r}')
        block, stage_blocks = ResNet.arch_settings[depth]
        if not isinstance(stage, int) or not 1 <= stage < len(stage_blocks):
            # stage 0 has no previous stage whose features it could take
            raise ValueError(f'ResLayer stage must be an int in 1..{len(stage_blocks) - 1}, '
                             f'got {stage!r}')
        if dcn is not None and not (isinstance(dcn, dict) and 'type' in dcn):
            raise ValueError(f'ResLayer dcn must be None or a conv layer config dict with a '
                             f"\"type\" (e.g. dict(type='DCN', deform_groups=1)), got {dcn!r}")
        if init_cfg is not None and pretrained is not None:
            raise ValueError('ResLayer: give init_cfg or pretrained, not both')
        if pretrained is not None and not isinstance(pretrained, str):
            raise TypeError(f'ResLayer pretrained must be a str or None, got {pretrained!r}')
        self.norm_eval = norm_eval
        self.norm_cfg = norm_cfg
        self.stage = stage
        self.fp16_enabled = False
        planes = 64 * 2**stage
        inplanes = 64 * 2**(stage - 1) * block.expansion
        self.add_module(f'layer{stage + 1}', _ResLayer(
            block=block, inplanes=inplanes, planes=planes, num_blocks=stage_blocks[stage],
            stride=stride, dilation=dilation, style=style, with_cp=with_cp,
            cp_use_reentrant=cp_use_reentrant, norm_cfg=norm_cfg,
            **(dict(dcn=dcn) if dcn is not None else {})))
        if isinstance(pretrained, str):
            warnings.warn('ResLayer pretrained is deprecated, use init_cfg=dict('
                          "type='Pretrained', checkpoint=...)", DeprecationWarning)
            init_cfg = dict(type='Pretrained', checkpoint=pretrained)
        self.init_cfg = check_pretrained_cfg(init_cfg, 'ResLayer')
        self._init_default_weights()

    @property
    def res_layer(self):
        return getattr(self, f'layer{self.stage + 1}')

    def _init_default_weights(self):
        """mmdet's default: Kaiming (fan_out, normal) convs, BatchNorm / GroupNorm weight 1 and
        bias 0 (no zero-initialised residual); a deformable conv keeps mmcv's init and its zero
        offset conv (see :meth:`ResNet._init_default_weights`)."""
        offsets = {id(m.conv_offset) for m in self.modules() if hasattr(m, 'conv_offset')}
        for m in self.modules():
            if isinstance(m, nn.Conv2d) and id(m) not in offsets:
                nn.init.kaiming_normal_(m.weight, mode='fan_out', nonlinearity='relu')
                if m.bias is not None:
                    nn.init.zeros_(m.bias)
            elif isinstance(m, (_BatchNorm, nn.GroupNorm)) and m.weight is not None:
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)

    def init_weights(self):
        """Load a ``Pretrained`` init_cfg (a ResNet checkpoint: its ``layer{stage + 1}``)."""
        load_pretrained(self, self.init_cfg, type(self).__name__)

    def chain_steps(self, prefix=''):
        """The blocks as :class:`~ckptzoo.models.checkpointing.ChainStep` named
        ``{prefix}layer{stage + 1}.{j}``, in order; the last one emits its output."""
        name = f'layer{self.stage + 1}'
        blocks = list(self.res_layer)
        return [chain_step(f'{prefix}{name}.{j}', block.cp_unit, block, block,
                           emit=j == len(blocks) - 1) for j, block in enumerate(blocks)]

    @auto_fp16()
    def forward(self, x):
        return self.res_layer(x)

    def train(self, mode=True):
        super().train(mode)
        if self.norm_eval:
            for m in self.modules():
                if isinstance(m, nn.BatchNorm2d):
                    m.eval()
        return self
