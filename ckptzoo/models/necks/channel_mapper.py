"""mmdet 2.x ``ChannelMapper``: one ConvModule per backbone output maps it to ``out_channels``;
``num_outs`` beyond the inputs adds stride-2 3x3 ConvModules, the first on the last input, the
others on the output below (Deformable DETR's neck).

Keys: ``convs.{i}.conv.*`` (``.gn.*`` / ``.bn.*``) and ``extra_convs.{j}.conv.*``.

Checkpoint units: ``level{i}``, one per output, one chain whose state is the last output (the
extra levels take it), every output leaving.
"""
from functools import partial

import torch.nn as nn

from ...registry import MODELS
from ..checkpointing import ChainStep, CheckpointOwnerMixin, CheckpointUnit
from ..utils import ConvModule, apply_init_cfg
from ..utils.pretrained import load_pretrained

__all__ = ['ChannelMapper']


@MODELS.register_module()
class ChannelMapper(CheckpointOwnerMixin, nn.Module):
    """Args (mmdet's):
        in_channels (list[int]): channels of each input.
        out_channels (int): channels of every output.
        kernel_size (int): kernel of the mapping convs (padding ``(k - 1) // 2``).
        conv_cfg, norm_cfg, act_cfg: of every ConvModule (act default ReLU).
        num_outs (int | None): outputs; None: one per input.
        init_cfg (dict): Xavier uniform on Conv2d by default.
        with_cp (bool): ``'full'`` on every unit (not an mmdet argument; default False).
        cp_use_reentrant (bool): torch's reentrant checkpoint.
    """

    def __init__(self, in_channels, out_channels, kernel_size=3, conv_cfg=None, norm_cfg=None,
                 act_cfg=dict(type='ReLU'), num_outs=None,
                 init_cfg=dict(type='Xavier', layer='Conv2d', distribution='uniform'),
                 with_cp=False, cp_use_reentrant=False):
        super().__init__()
        if not isinstance(in_channels, list) or not in_channels:
            raise TypeError(f'ChannelMapper in_channels must be a non-empty list, '
                            f'got {in_channels!r}')
        if not isinstance(with_cp, bool):
            raise TypeError(f'ChannelMapper with_cp must be a bool, got {with_cp!r}')
        if num_outs is None:
            num_outs = len(in_channels)
        if not isinstance(num_outs, int) or num_outs < len(in_channels):
            raise ValueError(f'ChannelMapper num_outs must be None or an int >= '
                             f'{len(in_channels)} (one per input), got {num_outs!r}')
        self.in_channels = in_channels
        self.num_outs = num_outs
        self.init_cfg = init_cfg
        self.extra_convs = None
        self.convs = nn.ModuleList(
            ConvModule(c, out_channels, kernel_size, padding=(kernel_size - 1) // 2,
                       conv_cfg=conv_cfg, norm_cfg=norm_cfg, act_cfg=act_cfg)
            for c in in_channels)
        if num_outs > len(in_channels):
            self.extra_convs = nn.ModuleList(
                ConvModule(in_channels[-1] if i == 0 else out_channels, out_channels, 3,
                           stride=2, padding=1, conv_cfg=conv_cfg, norm_cfg=norm_cfg,
                           act_cfg=act_cfg)
                for i in range(num_outs - len(in_channels)))
        self.level_units = [CheckpointUnit.from_flag(with_cp, cp_use_reentrant)
                            for _ in range(num_outs)]
        apply_init_cfg(self, init_cfg)

    def init_weights(self):
        """Load a ``Pretrained`` init_cfg; the other kinds were applied at construction."""
        if isinstance(self.init_cfg, dict) and self.init_cfg.get('type') == 'Pretrained':
            load_pretrained(self, self.init_cfg, type(self).__name__)

    def _conv(self, i):
        n = len(self.convs)
        return self.convs[i] if i < n else self.extra_convs[i - n]

    def _step(self, i, previous, x=None):
        conv = self._conv(i)
        out = self.level_units[i](conv, previous if x is None else x, module=conv)
        return out, out

    def _checkpoint_steps(self, inputs=None):
        """One chain (state: the last output); a mapped level takes its input, the first extra
        level the last input, the others the state."""
        n = len(self.convs)
        steps = []
        for i in range(self.num_outs):
            if i < n:
                args = () if inputs is None else (inputs[i], )
            else:
                args = () if inputs is None or i > n else (inputs[-1], )
            steps.append(ChainStep(f'level{i}', self.level_units[i], partial(self._step, i),
                                   self._conv(i), args, leaves=True))
        return [steps]

    def forward(self, inputs):
        if len(inputs) != len(self.convs):
            raise ValueError(f'ChannelMapper expects {len(self.convs)} inputs (in_channels), '
                             f'got {len(inputs)}')
        return tuple(self._run_chain(self._checkpoint_steps(inputs)[0], None)[1])
