"""DetectoRS's Recursive Feature Pyramid (mmdet 2.x ``RFP``, ``mmdet/models/necks/rfp.py``).

An FPN run ``rfp_steps`` times: after each pyramid, ``ASPP`` (four parallel convs, the last on
the global mean) turns each level into feedback for the next step's backbone
(``rfp_modules[s - 1]``, built from ``rfp_backbone``, a ``DetectoRS_ResNet`` with
``rfp_inplanes``), which runs again on the input image (the backbone's ``output_img=True``
puts it first in the neck's inputs). The new pyramid (same lateral / fpn convs) is fused with
the previous one per level: ``w * new + (1 - w) * old``, ``w = sigmoid(rfp_weight(new))``.

Keys are mmdet's: FPN's, ``rfp_modules.{s}.*`` (the backbones' own), ``rfp_aspp.aspp.{k}.*``,
``rfp_weight.*``.

Checkpoint units: the first pyramid's are FPN's (``level{i}``); every later step ``s`` has
``step{s}.aspp{i}`` (the feedback of level ``i``), ``step{s}.level{i}`` (its pyramid, chained
as FPN's) and ``step{s}.fuse{i}``; the step's backbone is a checkpoint owner of its own
(``rfp_modules.{s-1}.stem``, ``...layer3.4``). ``with_cp`` sets all of RFP's to ``'full'``.
ASPP runs only on the levels a backbone stage takes (mmdet also runs it on the last level and
drops the result: the same outputs and gradients).

Initialisation at construction: Xavier (uniform) for the lateral and output convs,
``rfp_weight`` 0 (an even mix at first), Kaiming for ASPP: what mmdet's ``init_weights`` and
ASPP's ``init_cfg`` say, although mmdet never applies the latter (its ASPP keeps torch's
default). ``init_weights`` lets each step's backbone load its ``pretrained``.
"""
from functools import partial

import torch
import torch.nn as nn
import torch.nn.functional as F

from ...registry import MODELS, build_backbone
from ...runner.fp16 import auto_fp16
from ..checkpointing import ChainStep, CheckpointUnit
from ..utils import apply_init_cfg
from .fpn import FPN

__all__ = ['ASPP', 'RFP']


class ASPP(nn.Module):
    """Atrous spatial pyramid pooling as DetectoRS uses it: one conv per dilation (3x3, or 1x1
    for dilation 1), the last on the global average, each with a ReLU, concatenated:
    ``len(dilations) * out_channels`` channels out."""

    def __init__(self, in_channels, out_channels, dilations=(1, 3, 6, 1),
                 init_cfg=dict(type='Kaiming', layer='Conv2d')):
        super().__init__()
        if not isinstance(dilations, (list, tuple)) or len(dilations) < 2 or dilations[-1] != 1:
            raise ValueError(f'ASPP dilations must be two or more ints, the last 1 (the '
                             f'global-average branch), got {dilations!r}')
        self.aspp = nn.ModuleList(
            nn.Conv2d(in_channels, out_channels, kernel_size=3 if d > 1 else 1, stride=1,
                      dilation=d, padding=d if d > 1 else 0, bias=True) for d in dilations)
        self.gap = nn.AdaptiveAvgPool2d(1)
        self.init_cfg = init_cfg
        apply_init_cfg(self, init_cfg)

    def forward(self, x):
        outs = [F.relu(conv(x)) for conv in self.aspp[:-1]]
        pooled = F.relu(self.aspp[-1](self.gap(x)))
        return torch.cat(outs + [pooled.expand_as(outs[-1])], dim=1)


@MODELS.register_module()
class RFP(FPN):
    """RFP (Qiao et al. 2020), mmdet 2.x arguments.

    Args:
        rfp_steps (int): pyramids computed (1: a plain FPN on the image-prefixed inputs).
        rfp_backbone (dict): config of the backbone each later step runs (``rfp_forward``).
        aspp_out_channels (int): channels of each ASPP branch; ``aspp_out_channels *
            len(aspp_dilations)`` must be the backbone's ``rfp_inplanes``.
        aspp_dilations (tuple[int]): one ASPP branch each; the last must be 1.
        init_cfg: must be None (as mmdet: the initialisation is fixed, see the module).
        **kwargs: FPN's (``in_channels`` without the image, ``with_cp`` ...).
    """

    def __init__(self, rfp_steps, rfp_backbone, aspp_out_channels, aspp_dilations=(1, 3, 6, 1),
                 init_cfg=None, **kwargs):
        if init_cfg is not None:
            raise ValueError(f'RFP init_cfg must be None (its initialisation is fixed, as '
                             f'mmdet), got {init_cfg!r}')
        if isinstance(rfp_steps, bool) or not isinstance(rfp_steps, int) or rfp_steps < 1:
            raise ValueError(f'rfp_steps must be a positive int, got {rfp_steps!r}')
        super().__init__(init_cfg=dict(type='Xavier', layer='Conv2d', distribution='uniform'),
                         **kwargs)
        self.init_cfg = None
        self.rfp_steps = rfp_steps
        self.rfp_modules = nn.ModuleList(build_backbone(rfp_backbone)
                                         for _ in range(1, rfp_steps))
        self.rfp_aspp = ASPP(self.out_channels, aspp_out_channels, aspp_dilations)
        self.rfp_weight = nn.Conv2d(self.out_channels, 1, kernel_size=1, stride=1, padding=0,
                                    bias=True)
        nn.init.zeros_(self.rfp_weight.weight)
        nn.init.zeros_(self.rfp_weight.bias)
        feedback = aspp_out_channels * len(aspp_dilations)
        for backbone in self.rfp_modules:
            if getattr(backbone, 'rfp_inplanes', feedback) not in (None, feedback):
                raise ValueError(f'the rfp_backbone\'s rfp_inplanes must be aspp_out_channels '
                                 f'* len(aspp_dilations) = {feedback}, got '
                                 f'{backbone.rfp_inplanes!r}')
        flag, reentrant = kwargs.get('with_cp', False), kwargs.get('cp_use_reentrant', False)
        levels = len(self.fpn_convs)
        self.step_units = [[CheckpointUnit.from_flag(flag, reentrant) for _ in range(levels)]
                           for _ in self.rfp_modules]
        self.aspp_units = [[CheckpointUnit.from_flag(flag, reentrant)
                            for _ in self._feedback_levels(b)] for b in self.rfp_modules]
        self.fuse_units = [[CheckpointUnit.from_flag(flag, reentrant)
                            for _ in range(self.num_outs)] for _ in self.rfp_modules]

    def _feedback_levels(self, backbone):
        """The levels whose ASPP feedback a stage of ``backbone`` takes (1 .. stages - 1)."""
        return range(1, min(self.num_outs, getattr(backbone, 'num_stages', self.num_outs)))

    def _checkpoint_steps(self, inputs=None, units=None, prefix=''):
        """FPN's chains for one pyramid (given ``inputs`` / ``units``); without them, the
        description of all: the first pyramid's, then per later step its ASPP units (one
        each), its pyramid's chains and its fusion units (one each)."""
        if inputs is not None or units is not None:
            return super()._checkpoint_steps(inputs, units, prefix)
        chains = super()._checkpoint_steps()
        for s, backbone in enumerate(self.rfp_modules, 1):
            chains += [[ChainStep(f'step{s}.aspp{i}', unit, partial(self._aspp_step, unit),
                                  self.rfp_aspp)]
                       for i, unit in zip(self._feedback_levels(backbone), self.aspp_units[s - 1])]
            chains += super()._checkpoint_steps(None, self.step_units[s - 1], f'step{s}.')
            chains += [[ChainStep(f'step{s}.fuse{i}', unit, partial(self._fuse_step, unit),
                                  self.rfp_weight)]
                       for i, unit in enumerate(self.fuse_units[s - 1])]
        return chains

    def _aspp_step(self, unit, _, x):
        out = unit(self.rfp_aspp, x, module=self.rfp_aspp)
        return out, out

    def _fuse_step(self, unit, _, new, old):
        out = unit(self._fuse, new, old, module=self.rfp_weight)
        return out, out

    def _fuse(self, new, old):
        weight = torch.sigmoid(self.rfp_weight(new))
        return weight * new + (1 - weight) * old

    def init_weights(self):
        """Each step's backbone loads its ``pretrained`` (the rest is set at construction)."""
        for backbone in self.rfp_modules:
            backbone.init_weights()

    @auto_fp16()
    def forward(self, inputs):
        if len(inputs) != len(self.in_channels) + 1:
            raise ValueError(f'RFP expects the image and {len(self.in_channels)} features '
                             f'(in_channels; give the backbone output_img=True), got '
                             f'{len(inputs)} inputs')
        img, inputs = inputs[0], tuple(inputs[1:])
        x = self._pyramid(inputs)
        for s, backbone in enumerate(self.rfp_modules, 1):
            feedback = [x[0]] + [
                self._aspp_step(unit, None, x[i])[0]
                for i, unit in zip(self._feedback_levels(backbone), self.aspp_units[s - 1])]
            new = self._pyramid(backbone.rfp_forward(img, feedback), self.step_units[s - 1],
                                f'step{s}.')
            x = tuple(self._fuse_step(unit, None, a, b)[0]
                      for unit, a, b in zip(self.fuse_units[s - 1], new, x))
        return x
