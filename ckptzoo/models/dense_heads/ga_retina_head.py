"""mmdet 2.x ``GARetinaHead``: RetinaNet's two towers under guided anchoring. The location
map comes from the classification tower, the shape map from the regression tower, each tower
is adapted to the shape (``feature_adaption_cls`` / ``_reg``) before the 3x3 ``retina_cls`` /
``retina_reg``. State-dict keys equal mmdet's; checkpoint units ``level{i}`` as
:class:`GuidedAnchorHead`."""
import torch.nn as nn

from ...ops import MaskedConv2d
from ...registry import MODELS
from ..utils import ConvModule
from .guided_anchor_head import FeatureAdaption, GuidedAnchorHead

__all__ = ['GARetinaHead']


@MODELS.register_module()
class GARetinaHead(GuidedAnchorHead):
    """Args: ``stacked_convs`` (tower depth), ``conv_cfg``, ``norm_cfg`` (the tower convs),
    ``init_cfg`` (default Normal std 0.01 with the focal prior on ``conv_loc`` and
    ``retina_cls``); the rest as :class:`GuidedAnchorHead`."""

    def __init__(self, num_classes, in_channels, stacked_convs=4, conv_cfg=None, norm_cfg=None,
                 init_cfg=None, **kwargs):
        if not (isinstance(stacked_convs, int) and stacked_convs >= 0):
            raise ValueError(f'stacked_convs must be a non-negative int, got {stacked_convs!r}')
        if init_cfg is None:
            init_cfg = dict(type='Normal', layer='Conv2d', std=0.01, override=[
                dict(type='Normal', name='conv_loc', std=0.01, bias_prob=0.01),
                dict(type='Normal', name='retina_cls', std=0.01, bias_prob=0.01)])
        self.stacked_convs = stacked_convs
        self.conv_cfg = conv_cfg
        self.norm_cfg = norm_cfg
        super().__init__(num_classes, in_channels, init_cfg=init_cfg, **kwargs)

    def _init_layers(self):
        self.relu = nn.ReLU(inplace=True)
        self.cls_convs = nn.ModuleList()
        self.reg_convs = nn.ModuleList()
        for i in range(self.stacked_convs):
            chn = self.in_channels if i == 0 else self.feat_channels
            for convs in (self.cls_convs, self.reg_convs):
                convs.append(ConvModule(chn, self.feat_channels, 3, stride=1, padding=1,
                                        conv_cfg=self.conv_cfg, norm_cfg=self.norm_cfg))
        # mmdet sizes these by feat_channels whatever stacked_convs is
        self.conv_loc = nn.Conv2d(self.feat_channels, 1, 1)
        self.conv_shape = nn.Conv2d(self.feat_channels, self.num_base_priors * 2, 1)
        self.feature_adaption_cls = FeatureAdaption(self.feat_channels, self.feat_channels,
                                                    kernel_size=3,
                                                    deform_groups=self.deform_groups)
        self.feature_adaption_reg = FeatureAdaption(self.feat_channels, self.feat_channels,
                                                    kernel_size=3,
                                                    deform_groups=self.deform_groups)
        self.retina_cls = MaskedConv2d(self.feat_channels,
                                       self.num_base_priors * self.cls_out_channels, 3,
                                       padding=1)
        self.retina_reg = MaskedConv2d(self.feat_channels, self.num_base_priors * 4, 3,
                                       padding=1)

    def forward_single(self, x):
        cls_feat = reg_feat = x
        for conv in self.cls_convs:
            cls_feat = conv(cls_feat)
        for conv in self.reg_convs:
            reg_feat = conv(reg_feat)
        loc_pred = self.conv_loc(cls_feat)
        shape_pred = self.conv_shape(reg_feat)
        cls_feat = self.feature_adaption_cls(cls_feat, shape_pred)
        reg_feat = self.feature_adaption_reg(reg_feat, shape_pred)
        mask = self._test_mask(loc_pred)
        return (self.retina_cls(cls_feat, mask), self.retina_reg(reg_feat, mask), shape_pred,
                loc_pred)
