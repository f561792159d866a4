"""DetectoRS's ResNet (mmdet 2.x ``DetectoRS_ResNet``): switchable atrous convs (``sac``) in
the stages ``stage_with_sac`` chooses, and, for the backbones that the ``RFP`` neck unrolls,
``rfp_forward``: the first block of every stage but the first adds a 1x1 conv (``rfp_conv``,
``rfp_inplanes`` channels in) of the feedback the neck sends back, before its last ReLU.

State-dict keys are mmdet's (``layer2.0.rfp_conv.*``, a SAC's ``layer2.0.conv2.switch.*``
...). The stages are mmdet's DetectoRS ``ResLayer``, whose ``avg_down`` pools only at stride 2
(mmdet's generic ResLayer pools at every stride, which moves the downsample keys).

Checkpoint units are ResNet's (``stem``, ``layer{i}.{j}``) and are the same units in
``rfp_forward``, where a block's unit also covers its ``rfp_conv`` and the addition; one chain
in both passes, so segments work in either. ``output_img`` puts the input image first in the
outputs (what ``RFP`` needs to run the next step's backbone).

Initialisation at construction: ResNet's (torchvision's) for the convs; every SAC its own
(switch bias 1, ``weight_diff`` and context / offset convs 0) and every ``rfp_conv`` 0, so an
RFP step starts as the plain backbone. mmdet meant the same (the blocks' ``init_cfg``) but its
``init_weights`` never applies it: without ``pretrained`` it kaiming-initialises those convs
too; with it, ``rfp_conv`` keeps torch's default init. ``init_weights`` loads ``pretrained`` /
``init_cfg`` (non-strict), where ConvAWS derives its buffers from a plain conv's weights.
"""
from functools import partial

import torch.nn as nn

from ...registry import MODELS
from ..checkpointing import ChainStep
from ..utils import SAConv2d, build_conv_layer, build_norm_layer
from ..utils.pretrained import check_pretrained_cfg
from .resnet import Bottleneck as _Bottleneck
from .resnet import ResNet

__all__ = ['Bottleneck', 'ResLayer', 'DetectoRS_ResNet']


class Bottleneck(_Bottleneck):
    """ResNet's Bottleneck with a SAC ``conv2`` (``sac``: its conv config) and, with
    ``rfp_inplanes``, an ``rfp_conv`` (1x1, bias) that :meth:`rfp_forward` adds."""

    expansion = 4

    def __init__(self, inplanes, planes, rfp_inplanes=None, sac=None, init_cfg=None, **kwargs):
        super().__init__(inplanes, planes, **kwargs)
        if sac is not None and not (isinstance(sac, dict) and 'type' in sac):
            raise ValueError(f'sac must be None or a conv config dict (e.g. dict(type=\'SAC\', '
                             f'use_deform=True)), got {sac!r}')
        self.sac = sac
        self.with_sac = sac is not None
        self.init_cfg = init_cfg  # accepted as mmdet's; see the module docstring
        if self.with_sac:  # replaced in place: conv2 keeps its state-dict position
            self.conv2 = build_conv_layer(sac, planes, planes, kernel_size=3,
                                          stride=self.conv2.stride, padding=self.dilation,
                                          dilation=self.dilation, bias=False)
        self.rfp_inplanes = rfp_inplanes
        if rfp_inplanes:
            self.rfp_conv = build_conv_layer(None, rfp_inplanes, planes * self.expansion, 1,
                                             stride=1, bias=True)

    def _rfp_inner_forward(self, x, rfp_feat):
        return self._inner_forward(x) + self.rfp_conv(rfp_feat)

    def rfp_forward(self, x, rfp_feat):
        """The block with the RFP feedback ``rfp_feat`` added (ignored without
        ``rfp_conv``), all in the block's checkpoint unit."""
        if not self.rfp_inplanes:
            return self(x)
        return self.relu(self.cp_unit(self._rfp_inner_forward, x, rfp_feat))


class ResLayer(nn.Sequential):
    """mmdet's DetectoRS ``ResLayer``: the generic one's arguments, ``rfp_inplanes`` for the
    first block only, ``avg_down`` pooling only when ``stride != 1``, and
    ``downsample_first=True`` only."""

    def __init__(self, block, inplanes, planes, num_blocks, stride=1, avg_down=False,
                 conv_cfg=None, norm_cfg=dict(type='BN'), downsample_first=True,
                 rfp_inplanes=None, **kwargs):
        if not downsample_first:
            raise ValueError(f'downsample_first={downsample_first!r} is not supported in '
                             f'DetectoRS (as mmdet)')
        self.block = block
        downsample = None
        if stride != 1 or inplanes != planes * block.expansion:
            layers, conv_stride = [], stride
            if avg_down and stride != 1:
                conv_stride = 1
                layers.append(nn.AvgPool2d(kernel_size=stride, stride=stride, ceil_mode=True,
                                           count_include_pad=False))
            layers += [build_conv_layer(conv_cfg, inplanes, planes * block.expansion, 1,
                                        stride=conv_stride, bias=False),
                       build_norm_layer(norm_cfg, planes * block.expansion)[1]]
            downsample = nn.Sequential(*layers)
        common = dict(conv_cfg=conv_cfg, norm_cfg=norm_cfg, **kwargs)
        blocks = [block(inplanes=inplanes, planes=planes, stride=stride, downsample=downsample,
                        rfp_inplanes=rfp_inplanes, **common)]
        blocks += [block(inplanes=planes * block.expansion, planes=planes, stride=1, **common)
                   for _ in range(1, num_blocks)]
        super().__init__(*blocks)


@MODELS.register_module()
class DetectoRS_ResNet(ResNet):
    """ResNet backbone for DetectoRS, mmdet 2.x arguments.

    Args:
        sac (dict | None): conv config of the SAC layers, e.g. ``dict(type='SAC',
            use_deform=True)``; they replace ``conv2`` in the stages of ``stage_with_sac``.
        stage_with_sac (tuple[bool]): one flag per stage.
        rfp_inplanes (int | None): channels of the RFP feedback: adds ``rfp_conv`` to the
            first block of stages 2..4 (the backbones RFP builds).
        output_img (bool): put the input image first in the outputs (the RFP neck's input).
        pretrained, init_cfg: ``init_cfg`` may only be ``dict(type='Pretrained',
            checkpoint=...)`` (as mmdet); the others are :class:`ResNet`'s (depth 50, 101,
            152).
    """

    arch_settings = {
        50: (Bottleneck, (3, 4, 6, 3)),
        101: (Bottleneck, (3, 4, 23, 3)),
        152: (Bottleneck, (3, 8, 36, 3)),
    }

    def __init__(self, sac=None, stage_with_sac=(False, False, False, False), rfp_inplanes=None,
                 output_img=False, pretrained=None, init_cfg=None, **kwargs):
        check_pretrained_cfg(init_cfg, type(self).__name__)
        num_stages = kwargs.get('num_stages', 4)
        if not isinstance(stage_with_sac, (list, tuple)) or len(stage_with_sac) != num_stages:
            raise ValueError(f'stage_with_sac needs one flag per stage ({num_stages}, '
                             f'num_stages), got {stage_with_sac!r}')
        if sac is not None and not (isinstance(sac, dict) and 'type' in sac):
            raise ValueError(f'sac must be None or a conv config dict (e.g. dict(type=\'SAC\', '
                             f'use_deform=True)), got {sac!r}')
        if rfp_inplanes is not None and (isinstance(rfp_inplanes, bool) or not isinstance(
                rfp_inplanes, int) or rfp_inplanes < 1):
            raise ValueError(f'rfp_inplanes must be None or a positive int, got '
                             f'{rfp_inplanes!r}')
        self.sac = sac
        self.stage_with_sac = tuple(stage_with_sac)
        self.rfp_inplanes = rfp_inplanes
        self.output_img = output_img
        super().__init__(pretrained=pretrained, init_cfg=init_cfg, **kwargs)

    def make_res_layer(self, **kwargs):
        """A DetectoRS ``ResLayer``; the stage index is the number of stages built so far."""
        i = len(self.res_layers)
        return ResLayer(sac=self.sac if self.stage_with_sac[i] else None,
                        rfp_inplanes=self.rfp_inplanes if i > 0 else None, **kwargs)

    def _init_default_weights(self):
        super()._init_default_weights()
        for m in self.modules():
            if isinstance(m, SAConv2d):
                m.init_weights()
            elif isinstance(m, Bottleneck) and m.rfp_inplanes:
                nn.init.zeros_(m.rfp_conv.weight)
                nn.init.zeros_(m.rfp_conv.bias)

    def _checkpoint_steps(self, rfp_feats=None):
        """ResNet's chain; given ``rfp_feats`` (one per stage, the first unused), the
        feedback enters the first block of each later stage as an input from outside."""
        chains = super()._checkpoint_steps()
        if rfp_feats is None:
            return chains
        steps = chains[0]
        for i, name in enumerate(self.res_layers[1:], 1):
            block = getattr(self, name)[0]
            if not block.rfp_inplanes:
                continue
            k = next(k for k, s in enumerate(steps) if s.name == f'{name}.0')
            steps[k] = ChainStep(steps[k].name, block.cp_unit,
                                 partial(self._rfp_step, block, steps[k].leaves), block,
                                 args=(rfp_feats[i], ), leaves=steps[k].leaves)
        return [steps]

    @staticmethod
    def _rfp_step(block, emit, x, rfp_feat):
        x = block.rfp_forward(x, rfp_feat)
        return x, (x if emit else None)

    def forward(self, x):
        outs = super().forward(x)
        return (x, ) + outs if self.output_img else outs

    def rfp_forward(self, x, rfp_feats):
        """The backbone with RFP's feedback: ``rfp_feats[i]`` goes to stage ``i``'s first
        block (``i >= 1``); the outputs of ``out_indices``, without the image."""
        if len(rfp_feats) < self.num_stages:
            raise ValueError(f'rfp_forward needs one feature per stage ({self.num_stages}), '
                             f'got {len(rfp_feats)}')
        _, outs = self._run_chain(self._checkpoint_steps(rfp_feats)[0], x)
        return tuple(o for o in outs if o is not None)
