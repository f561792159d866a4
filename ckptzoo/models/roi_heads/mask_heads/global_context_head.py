"""mmdet 2.x ``GlobalContextHead`` (SCNet): the last pyramid level through a conv tower and a
global average pool: the pooled ``(N, C, 1, 1)`` feature is the image's context, added to
every RoI feature of that image; a Linear on it predicts which classes the image holds
(``loss_glbctx``, a BCE-with-logits on the multi-hot ``gt_labels``)."""
import torch.nn as nn

from ....registry import MODELS
from ....runner.fp16 import auto_fp16, force_fp32
from ...utils import ConvModule, ResLayer, SimplifiedBasicBlock, apply_init_cfg

__all__ = ['GlobalContextHead']


@MODELS.register_module()
class GlobalContextHead(nn.Module):
    """Args (mmdet's): num_convs (4), in_channels (256), conv_out_channels (256), num_classes
    (80), loss_weight (1.0), conv_cfg, norm_cfg, conv_to_res (False: ``num_convs``
    ConvModules; True: ``num_convs // 2`` ``SimplifiedBasicBlock`` s), init_cfg (Normal std
    0.01 on ``fc``)."""

    def __init__(self, num_convs=4, in_channels=256, conv_out_channels=256, num_classes=80,
                 loss_weight=1.0, conv_cfg=None, norm_cfg=None, conv_to_res=False,
                 init_cfg=dict(type='Normal', std=0.01, override=dict(name='fc'))):
        super().__init__()
        self.num_convs = num_convs
        self.in_channels = in_channels
        self.conv_out_channels = conv_out_channels
        self.num_classes = num_classes
        self.loss_weight = loss_weight
        self.conv_cfg = conv_cfg
        self.norm_cfg = norm_cfg
        self.conv_to_res = conv_to_res
        self.fp16_enabled = False
        if conv_to_res:
            self.convs = ResLayer(SimplifiedBasicBlock, in_channels, conv_out_channels,
                                  num_convs // 2, conv_cfg=conv_cfg, norm_cfg=norm_cfg)
            self.num_convs = num_convs // 2
        else:
            self.convs = nn.ModuleList(
                ConvModule(in_channels if i == 0 else conv_out_channels, conv_out_channels, 3,
                           padding=1, conv_cfg=conv_cfg, norm_cfg=norm_cfg)
                for i in range(num_convs))
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(conv_out_channels, num_classes)
        self.criterion = nn.BCEWithLogitsLoss()
        self.init_cfg = init_cfg
        apply_init_cfg(self, init_cfg)

    def init_weights(self):
        """The ``init_cfg`` was applied at construction."""

    @auto_fp16()
    def forward(self, feats):
        """``(mc_pred, context)``: ``(N, num_classes)`` logits and the ``(N, C, 1, 1)``
        pooled feature of the last level."""
        x = feats[-1]
        for conv in self.convs:
            x = conv(x)
        x = self.pool(x)
        return self.fc(x.reshape(x.size(0), -1)), x

    @force_fp32(apply_to=('pred', ))
    def loss(self, pred, labels):
        """``loss_weight`` times the BCE of ``pred`` against each image's classes present."""
        targets = pred.new_zeros(pred.size())
        for i, label in enumerate(labels):
            targets[i, label.unique()] = 1.0
        return self.loss_weight * self.criterion(pred, targets)
