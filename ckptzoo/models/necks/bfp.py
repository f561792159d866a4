"""mmdet 2.x ``BFP``, the balanced feature pyramid of Libra R-CNN (Pang et al. 2019): the levels
are resized to ``refine_level``'s size (max-pooled from below, nearest-upsampled from above) and
averaged, the average is refined (a 3x3 ConvModule or a ``NonLocal2d``) and resized back onto
every level as a residual.

Keys are mmdet's (``refine.conv.*`` or ``refine.g.conv.*``, ``refine.conv_out.conv.*``,
``refine.theta.conv.*``, ``refine.phi.conv.*``); in Libra R-CNN it is ``neck.1`` after an FPN.

Checkpoint units, one chain: ``gather`` (resize and average; the state is the average),
``refine`` (only with a ``refine_type``), ``scatter`` (resize back and add to each level).
"""
import torch.nn as nn
import torch.nn.functional as F

from ...registry import MODELS
from ..checkpointing import ChainStep, CheckpointOwnerMixin, CheckpointUnit
from ..utils import ConvModule, NonLocal2d, apply_init_cfg
from ..utils.pretrained import load_pretrained

__all__ = ['BFP']

_REFINE_TYPES = (None, 'conv', 'non_local')


@MODELS.register_module()
class BFP(CheckpointOwnerMixin, nn.Module):
    """Args (mmdet 2.x's):
        in_channels (int): channels of every level.
        num_levels (int): number of levels taken and returned.
        refine_level (int): the level whose size the levels are gathered at.
        refine_type (str | None): None, 'conv' or 'non_local'.
        conv_cfg, norm_cfg (dict | None): of the refine op.
        init_cfg (dict): Xavier uniform on Conv2d, after which the refine op takes its own
            initialisation again (mmcv's ``init_weights`` calls the child's last).
        with_cp (bool): ``'full'`` on every unit (not an mmdet argument; default False).
        cp_use_reentrant (bool): torch's reentrant checkpoint instead of the non-reentrant one.
    """

    def __init__(self, in_channels, num_levels, refine_level=2, refine_type=None,
                 conv_cfg=None, norm_cfg=None,
                 init_cfg=dict(type='Xavier', layer='Conv2d', distribution='uniform'),
                 with_cp=False, cp_use_reentrant=False):
        super().__init__()
        if refine_type not in _REFINE_TYPES:
            raise ValueError(f'BFP refine_type must be None, \'conv\' or \'non_local\', got '
                             f'{refine_type!r}')
        if not (isinstance(num_levels, int) and num_levels > 0):
            raise ValueError(f'BFP num_levels must be a positive int, got {num_levels!r}')
        if not (isinstance(refine_level, int) and 0 <= refine_level < num_levels):
            raise ValueError(f'BFP refine_level must be in 0..{num_levels - 1}, got '
                             f'{refine_level!r}')
        if not isinstance(with_cp, bool):
            raise TypeError(f'BFP with_cp must be a bool, got {with_cp!r}')
        self.in_channels = in_channels
        self.num_levels = num_levels
        self.conv_cfg = conv_cfg
        self.norm_cfg = norm_cfg
        self.refine_level = refine_level
        self.refine_type = refine_type
        if refine_type == 'conv':
            self.refine = ConvModule(in_channels, in_channels, 3, padding=1, conv_cfg=conv_cfg,
                                     norm_cfg=norm_cfg)
        elif refine_type == 'non_local':
            self.refine = NonLocal2d(in_channels, reduction=1, use_scale=False,
                                     conv_cfg=conv_cfg, norm_cfg=norm_cfg)
        self.units = {name: CheckpointUnit.from_flag(with_cp, cp_use_reentrant)
                      for name in ('gather', 'refine', 'scatter')}
        self.init_cfg = init_cfg
        apply_init_cfg(self, init_cfg)
        if refine_type is not None:
            self.refine.init_weights()

    def init_weights(self):
        """Load a ``Pretrained`` init_cfg; the other kinds were applied at construction."""
        if isinstance(self.init_cfg, dict) and self.init_cfg.get('type') == 'Pretrained':
            load_pretrained(self, self.init_cfg, type(self).__name__)

    # ----------------------------------------------------------------------- checkpoint units
    def _checkpoint_steps(self, inputs=None):
        args = () if inputs is None else tuple(inputs)
        steps = [ChainStep('gather', self.units['gather'], self._gather_step, [], args)]
        if self.refine_type is not None:
            steps.append(ChainStep('refine', self.units['refine'], self._refine_step,
                                   self.refine))
        steps.append(ChainStep('scatter', self.units['scatter'], self._scatter_step, [], args,
                               leaves=True))
        return [steps]

    def _gather_step(self, _, *inputs):
        return self.units['gather'](self._gather, *inputs, module=[]), None

    def _refine_step(self, bsf):
        return self.units['refine'](self.refine, bsf, module=self.refine), None

    def _scatter_step(self, bsf, *inputs):
        outs = self.units['scatter'](self._scatter, bsf, *inputs, module=[])
        return outs, outs

    def _gather(self, *inputs):
        size = inputs[self.refine_level].shape[2:]
        feats = [F.adaptive_max_pool2d(x, output_size=size) if i < self.refine_level
                 else F.interpolate(x, size=size, mode='nearest')
                 for i, x in enumerate(inputs)]
        return sum(feats) / len(feats)

    def _scatter(self, bsf, *inputs):
        outs = []
        for i, x in enumerate(inputs):
            size = x.shape[2:]
            residual = F.interpolate(bsf, size=size, mode='nearest') \
                if i < self.refine_level else F.adaptive_max_pool2d(bsf, output_size=size)
            outs.append(residual + x)
        return tuple(outs)

    def forward(self, inputs):
        if len(inputs) != self.num_levels:
            raise ValueError(f'BFP expects {self.num_levels} levels (num_levels), got '
                             f'{len(inputs)}')
        return self._run_chain(self._checkpoint_steps(inputs)[0], None)[0]
