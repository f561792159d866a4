"""mmdet 2.x ``RetinaHead``: two towers of ``stacked_convs`` 3x3 ConvModules, then
``retina_cls`` / ``retina_reg``. State-dict keys equal mmdet's (``cls_convs.0.conv.weight``,
``retina_cls.bias``, ...), so mmdet 2.x RetinaNet checkpoints load.

Checkpoint units (:mod:`ckptzoo.models.checkpointing`): ``level{i}``, one per pyramid level,
covering that level's two towers and ``retina_cls`` / ``retina_reg``."""
import torch.nn as nn

from ...registry import MODELS
from ..utils import ConvModule
from .anchor_head import AnchorHead
from .level_units import LevelUnitsMixin

__all__ = ['RetinaHead']


@MODELS.register_module()
class RetinaHead(LevelUnitsMixin, AnchorHead):
    """RetinaNet head (Lin et al. 2017).

    Args:
        num_classes (int), in_channels (int), stacked_convs (int), feat_channels (int),
        conv_cfg, norm_cfg (dict | None): the tower convs.
        anchor_generator (dict): default RetinaNet's (3 octave scales x 3 ratios, strides
            8..128).
        init_cfg (dict): default Normal(std=0.01) convs and the ``retina_cls`` bias set so that
            every class starts at probability 0.01 (the focal-loss prior).
        with_cp (bool): ``'full'`` checkpointing of every level (not an mmdet 2.x argument;
            default False). ``set_checkpoint_plan`` changes modes later.
        cp_use_reentrant (bool): torch's reentrant checkpoint instead of the non-reentrant one.
        **kwargs: :class:`AnchorHead` arguments (bbox_coder, losses, train_cfg, test_cfg, ...).
    """

    def __init__(self, num_classes, in_channels, stacked_convs=4, conv_cfg=None, norm_cfg=None,
                 anchor_generator=dict(type='AnchorGenerator', octave_base_scale=4,
                                       scales_per_octave=3, ratios=[0.5, 1.0, 2.0],
                                       strides=[8, 16, 32, 64, 128]),
                 init_cfg=dict(type='Normal', layer='Conv2d', std=0.01,
                               override=dict(type='Normal', name='retina_cls', std=0.01,
                                             bias_prob=0.01)),
                 with_cp=False, cp_use_reentrant=False, **kwargs):
        if not (isinstance(stacked_convs, int) and stacked_convs >= 0):
            raise ValueError(f'stacked_convs must be a non-negative int, got {stacked_convs!r}')
        self.stacked_convs = stacked_convs
        self.conv_cfg = conv_cfg
        self.norm_cfg = norm_cfg
        super().__init__(num_classes, in_channels, anchor_generator=anchor_generator,
                         init_cfg=init_cfg, **kwargs)
        self._init_level_units(with_cp, cp_use_reentrant)

    def _init_layers(self):
        self.relu = nn.ReLU(inplace=True)
        self.cls_convs = nn.ModuleList()
        self.reg_convs = nn.ModuleList()
        for i in range(self.stacked_convs):
            chn = self.in_channels if i == 0 else self.feat_channels
            for convs in (self.cls_convs, self.reg_convs):
                convs.append(ConvModule(chn, self.feat_channels, 3, stride=1, padding=1,
                                        conv_cfg=self.conv_cfg, norm_cfg=self.norm_cfg))
        chn = self.feat_channels if self.stacked_convs else self.in_channels
        self.retina_cls = nn.Conv2d(chn, self.num_base_priors * self.cls_out_channels, 3,
                                    padding=1)
        self.retina_reg = nn.Conv2d(chn, self.num_base_priors * 4, 3, padding=1)

    def forward_single(self, x):
        cls_feat = reg_feat = x
        for conv in self.cls_convs:
            cls_feat = conv(cls_feat)
        for conv in self.reg_convs:
            reg_feat = conv(reg_feat)
        return self.retina_cls(cls_feat), self.retina_reg(reg_feat)

