"""mmdet 2.x ``ConvFCBBoxHead`` and its two configurations in the model zoo.

::

                                /-> cls convs -> cls fcs -> fc_cls
    shared convs -> shared fcs
                                \\-> reg convs -> reg fcs -> fc_reg

State-dict keys are mmdet's (``shared_fcs.0.weight``, ``shared_convs.0.conv.weight``,
``fc_cls.weight``, ``fc_reg.bias``, ...), in mmdet's order, so its checkpoints load.
"""
import torch.nn as nn

from ....registry import MODELS
from ...utils import ConvModule, build_linear_layer
from .bbox_head import BBoxHead

__all__ = ['ConvFCBBoxHead', 'Shared2FCBBoxHead', 'Shared4Conv1FCBBoxHead']


@MODELS.register_module()
class ConvFCBBoxHead(BBoxHead):
    """Args (mmdet 2.x's): ``num_shared_convs``, ``num_shared_fcs``, ``num_cls_convs``,
    ``num_cls_fcs``, ``num_reg_convs``, ``num_reg_fcs`` (layer counts), ``conv_out_channels``,
    ``fc_out_channels``, ``conv_cfg``, ``norm_cfg`` (of the 3x3 ConvModules), ``init_cfg``
    (default: :class:`BBoxHead`'s plus Xavier-uniform on every shared / cls / reg fc), and
    :class:`BBoxHead`'s arguments."""

    def __init__(self, num_shared_convs=0, num_shared_fcs=0, num_cls_convs=0, num_cls_fcs=0,
                 num_reg_convs=0, num_reg_fcs=0, conv_out_channels=256, fc_out_channels=1024,
                 conv_cfg=None, norm_cfg=None, init_cfg=None, **kwargs):
        counts = dict(num_shared_convs=num_shared_convs, num_shared_fcs=num_shared_fcs,
                      num_cls_convs=num_cls_convs, num_cls_fcs=num_cls_fcs,
                      num_reg_convs=num_reg_convs, num_reg_fcs=num_reg_fcs)
        for name, value in counts.items():
            if not (isinstance(value, int) and value >= 0):
                raise ValueError(f'{name} must be an int >= 0, got {value!r}')
        if sum(counts.values()) == 0:
            raise ValueError(f'{type(self).__name__} needs at least one conv or fc layer, got '
                             f'{counts}')
        if (num_cls_convs > 0 or num_reg_convs > 0) and num_shared_fcs > 0:
            raise ValueError('num_cls_convs and num_reg_convs must be 0 when num_shared_fcs > 0 '
                             '(convs cannot follow fcs)')
        if not kwargs.get('with_cls', True) and (num_cls_convs or num_cls_fcs):
            raise ValueError('with_cls=False takes no cls convs or fcs')
        if not kwargs.get('with_reg', True) and (num_reg_convs or num_reg_fcs):
            raise ValueError('with_reg=False takes no reg convs or fcs')
        self.num_shared_convs = num_shared_convs
        self.num_shared_fcs = num_shared_fcs
        self.num_cls_convs = num_cls_convs
        self.num_cls_fcs = num_cls_fcs
        self.num_reg_convs = num_reg_convs
        self.num_reg_fcs = num_reg_fcs
        self.conv_out_channels = conv_out_channels
        self.fc_out_channels = fc_out_channels
        self.conv_cfg = conv_cfg
        self.norm_cfg = norm_cfg
        super().__init__(init_cfg=init_cfg, **kwargs)

    def _init_layers(self):
        if self.with_avg_pool:
            self.avg_pool = nn.AvgPool2d(self.roi_feat_size)
        # mmdet registers fc_cls / fc_reg first (in BBoxHead) and rebuilds them at the end
        for name, used in (('fc_cls', self.with_cls), ('fc_reg', self.with_reg)):
            if used:
                self.add_module(name, None)
        self.shared_convs, self.shared_fcs, self.shared_out_channels = \
            self._add_conv_fc_branch(self.num_shared_convs, self.num_shared_fcs,
                                     self.in_channels, True)
        self.cls_convs, self.cls_fcs, self.cls_last_dim = self._add_conv_fc_branch(
            self.num_cls_convs, self.num_cls_fcs, self.shared_out_channels)
        self.reg_convs, self.reg_fcs, self.reg_last_dim = self._add_conv_fc_branch(
            self.num_reg_convs, self.num_reg_fcs, self.shared_out_channels)
        if self.num_shared_fcs == 0 and not self.with_avg_pool:
            if self.num_cls_fcs == 0:
                self.cls_last_dim *= self.roi_feat_area
            if self.num_reg_fcs == 0:
                self.reg_last_dim *= self.roi_feat_area
        self.relu = nn.ReLU(inplace=True)
        if self.with_cls:
            self.fc_cls = build_linear_layer(self.cls_predictor_cfg, self.cls_last_dim,
                                             self.cls_channels)
        if self.with_reg:
            self.fc_reg = build_linear_layer(self.reg_predictor_cfg, self.reg_last_dim,
                                             4 if self.reg_class_agnostic
                                             else 4 * self.num_classes)

    def _default_init_cfg(self):
        return super()._default_init_cfg() + [
            dict(type='Xavier', distribution='uniform',
                 override=[dict(name='shared_fcs'), dict(name='cls_fcs'),
                           dict(name='reg_fcs')])]

    def _add_conv_fc_branch(self, num_branch_convs, num_branch_fcs, in_channels,
                            is_shared=False):
        """convs -> (flatten) -> fcs; returns ``(convs, fcs, output dim)``."""
        last_layer_dim = in_channels
        branch_convs = nn.ModuleList()
        for i in range(num_branch_convs):
            branch_convs.append(ConvModule(last_layer_dim if i == 0 else self.conv_out_channels,
                                           self.conv_out_channels, 3, padding=1,
                                           conv_cfg=self.conv_cfg, norm_cfg=self.norm_cfg))
        if num_branch_convs > 0:
            last_layer_dim = self.conv_out_channels
        branch_fcs = nn.ModuleList()
        if num_branch_fcs > 0:
            if (is_shared or self.num_shared_fcs == 0) and not self.with_avg_pool:
                last_layer_dim *= self.roi_feat_area
            for i in range(num_branch_fcs):
                branch_fcs.append(nn.Linear(last_layer_dim if i == 0 else self.fc_out_channels,
                                            self.fc_out_channels))
            last_layer_dim = self.fc_out_channels
        return branch_convs, branch_fcs, last_layer_dim

    def _branch(self, x, convs, fcs):
        for conv in convs:
            x = conv(x)
        if x.dim() > 2:
            if self.with_avg_pool:
                x = self.avg_pool(x)
            x = x.flatten(1)
        for fc in fcs:
            x = self.relu(fc(x))
        return x

    def forward(self, x):
        for conv in self.shared_convs:
            x = conv(x)
        if self.num_shared_fcs > 0:
            if self.with_avg_pool:
                x = self.avg_pool(x)
            x = x.flatten(1)
            for fc in self.shared_fcs:
                x = self.relu(fc(x))
        cls_score = self.fc_cls(self._branch(x, self.cls_convs, self.cls_fcs)) \
            if self.with_cls else None
        bbox_pred = self.fc_reg(self._branch(x, self.reg_convs, self.reg_fcs)) \
            if self.with_reg else None
        return cls_score, bbox_pred


@MODELS.register_module()
class Shared2FCBBoxHead(ConvFCBBoxHead):
    """Two shared fcs (Faster / Mask R-CNN's box head)."""

    def __init__(self, fc_out_channels=1024, **kwargs):
        super().__init__(num_shared_convs=0, num_shared_fcs=2, num_cls_convs=0, num_cls_fcs=0,
                         num_reg_convs=0, num_reg_fcs=0, fc_out_channels=fc_out_channels,
                         **kwargs)


@MODELS.register_module()
class Shared4Conv1FCBBoxHead(ConvFCBBoxHead):
    """Four shared 3x3 convs and one shared fc."""

    def __init__(self, fc_out_channels=1024, **kwargs):
        super().__init__(num_shared_convs=4, num_shared_fcs=1, num_cls_convs=0, num_cls_fcs=0,
                         num_reg_convs=0, num_reg_fcs=0, fc_out_channels=fc_out_channels,
                         **kwargs)
