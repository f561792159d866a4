"""mmdet 2.x ``AnchorFreeHead``: the base of the heads that predict at points (FCOS,
FoveaBox, NAS-FCOS, AutoAssign, RepPoints' layers): two towers of ``stacked_convs`` 3x3
ConvModules (the last one deformable with ``dcn_on_last_conv``), then ``conv_cls`` /
``conv_reg``; points from :class:`MlvlPointGenerator` at the ``strides``. Subclasses give
``loss`` and ``get_targets``.

State-dict keys equal mmdet's. Checkpoint units: ``level{i}``, one per stride."""
import torch.nn as nn

from ...registry import MODELS, TASK_UTILS
from ...core.anchor import MlvlPointGenerator
from ..utils import ConvModule, apply_init_cfg
from .base_dense_head import BaseDenseHead
from .level_units import LevelUnitsMixin

__all__ = ['AnchorFreeHead']


@MODELS.register_module()
class AnchorFreeHead(LevelUnitsMixin, BaseDenseHead):
    """Args:
        num_classes (int), in_channels (int), feat_channels (int), stacked_convs (int).
        strides (tuple[int]): one per input level.
        dcn_on_last_conv (bool): the last conv of each tower a ``DCNv2``.
        conv_bias (bool | 'auto'): the towers' conv bias (``'auto'``: without a norm).
        loss_cls, loss_bbox, bbox_coder (dict), conv_cfg, norm_cfg (dict | None).
        train_cfg, test_cfg (dict), init_cfg (dict): applied at construction.
        with_cp (bool): ``'full'`` checkpointing of every level (not an mmdet 2.x argument).
        cp_use_reentrant (bool): torch's reentrant checkpoint instead of the non-reentrant one.
    """

    def __init__(self, num_classes, in_channels, feat_channels=256, stacked_convs=4,
                 strides=(4, 8, 16, 32, 64), dcn_on_last_conv=False, conv_bias='auto',
                 loss_cls=dict(type='FocalLoss', use_sigmoid=True, gamma=2.0, alpha=0.25,
                               loss_weight=1.0),
                 loss_bbox=dict(type='IoULoss', loss_weight=1.0),
                 bbox_coder=dict(type='DistancePointBBoxCoder'), conv_cfg=None, norm_cfg=None,
                 train_cfg=None, test_cfg=None,
                 init_cfg=dict(type='Normal', layer='Conv2d', std=0.01,
                               override=dict(type='Normal', name='conv_cls', std=0.01,
                                             bias_prob=0.01)),
                 with_cp=False, cp_use_reentrant=False):
        super().__init__()
        if not (isinstance(num_classes, int) and num_classes > 0):
            raise ValueError(f'num_classes must be a positive int, got {num_classes!r}')
        if not (isinstance(stacked_convs, int) and stacked_convs >= 0):
            raise ValueError(f'stacked_convs must be a non-negative int, got {stacked_convs!r}')
        if not (conv_bias == 'auto' or isinstance(conv_bias, bool)):
            raise ValueError(f"conv_bias must be 'auto' or a bool, got {conv_bias!r}")
        self.num_classes = num_classes
        self.use_sigmoid_cls = loss_cls.get('use_sigmoid', False)
        self.cls_out_channels = num_classes if self.use_sigmoid_cls else num_classes + 1
        self.in_channels = in_channels
        self.feat_channels = feat_channels
        self.stacked_convs = stacked_convs
        self.strides = strides
        self.dcn_on_last_conv = dcn_on_last_conv
        self.conv_bias = conv_bias
        self.loss_cls = MODELS.build(loss_cls)
        self.loss_bbox = MODELS.build(loss_bbox)
        self.bbox_coder = TASK_UTILS.build(bbox_coder)
        self.prior_generator = MlvlPointGenerator(strides)
        self.num_base_priors = self.prior_generator.num_base_priors[0]
        self.train_cfg = train_cfg
        self.test_cfg = test_cfg
        self.conv_cfg = conv_cfg
        self.norm_cfg = norm_cfg
        self.init_cfg = init_cfg
        self.fp16_enabled = False
        self._init_layers()
        apply_init_cfg(self, init_cfg)
        self._zero_conv_offsets()
        self._init_level_units(with_cp, cp_use_reentrant)

    def _init_layers(self):
        self._init_cls_convs()
        self._init_reg_convs()
        self._init_predictor()

    def _tower(self):
        convs = nn.ModuleList()
        for i in range(self.stacked_convs):
            chn = self.in_channels if i == 0 else self.feat_channels
            last_dcn = self.dcn_on_last_conv and i == self.stacked_convs - 1
            convs.append(ConvModule(chn, self.feat_channels, 3, stride=1, padding=1,
                                    conv_cfg=dict(type='DCNv2') if last_dcn else self.conv_cfg,
                                    norm_cfg=self.norm_cfg, bias=self.conv_bias))
        return convs

    def _init_cls_convs(self):
        self.cls_convs = self._tower()

    def _init_reg_convs(self):
        self.reg_convs = self._tower()

    def _init_predictor(self):
        self.conv_cls = nn.Conv2d(self.feat_channels, self.cls_out_channels, 3, padding=1)
        self.conv_reg = nn.Conv2d(self.feat_channels, 4, 3, padding=1)

    def forward(self, feats):
        """``(cls_scores, bbox_preds)`` over levels (``forward_single`` also gives the
        towers' features, which subclasses use)."""
        return super().forward(feats)[:2]

    def forward_single(self, x):
        """``(cls_score, bbox_pred, cls_feat, reg_feat)`` of one level."""
        cls_feat = reg_feat = x
        for layer in self.cls_convs:
            cls_feat = layer(cls_feat)
        cls_score = self.conv_cls(cls_feat)
        for layer in self.reg_convs:
            reg_feat = layer(reg_feat)
        return cls_score, self.conv_reg(reg_feat), cls_feat, reg_feat

    def loss(self, cls_scores, bbox_preds, gt_bboxes, gt_labels, img_metas,
             gt_bboxes_ignore=None):
        raise NotImplementedError(f'{type(self).__name__} gives no loss: AnchorFreeHead is a '
                                  'base class (use FCOSHead, FoveaHead, ...)')

    def get_targets(self, points, gt_bboxes_list, gt_labels_list):
        raise NotImplementedError(f'{type(self).__name__} gives no targets: AnchorFreeHead '
                                  'is a base class')
