"""mmdet 2.x ``DecoupledSOLOHead`` and ``DecoupledSOLOLightHead`` (SOLO's decoupled form):
a cell's mask is the product of an x-branch map (its column) and a y-branch map (its row),
so a level predicts ``2 * num_grid`` maps instead of ``num_grid ** 2``.

Keys as mmdet's (``mask_convs_x`` / ``mask_convs_y`` or, light, one ``mask_convs``;
``conv_mask_list_x`` / ``conv_mask_list_y``; ``cls_convs``; ``conv_cls``). Checkpoint units
and the chunked test-time upsampling as :class:`SOLOHead` (its module docstring)."""
import torch
import torch.nn as nn
import torch.nn.functional as F

from ...core.utils import generate_coordinate
from ...registry import MODELS
from .solo_head import SOLOHead

__all__ = ['DecoupledSOLOHead', 'DecoupledSOLOLightHead']

_DECOUPLED_INIT = [dict(type='Normal', layer='Conv2d', std=0.01),
                   dict(type='Normal', std=0.01, bias_prob=0.01,
                        override=dict(name='conv_mask_list_x')),
                   dict(type='Normal', std=0.01, bias_prob=0.01,
                        override=dict(name='conv_mask_list_y')),
                   dict(type='Normal', std=0.01, bias_prob=0.01,
                        override=dict(name='conv_cls'))]


@MODELS.register_module()
class DecoupledSOLOHead(SOLOHead):
    """Args as :class:`SOLOHead` (mmdet's), with its own ``init_cfg`` default. The mask
    loss gets the product of the two branches' sigmoids, so its ``loss_mask`` takes
    probabilities (mmdet's configs: ``DiceLoss(activate=False)``)."""

    def __init__(self, *args, init_cfg=_DECOUPLED_INIT, **kwargs):
        super().__init__(*args, init_cfg=init_cfg, **kwargs)

    def _init_layers(self):
        self.mask_convs_x = nn.ModuleList()
        self.mask_convs_y = nn.ModuleList()
        self.cls_convs = nn.ModuleList()
        for i in range(self.stacked_convs):
            chn = self.in_channels + 1 if i == 0 else self.feat_channels
            self.mask_convs_x.append(self._tower_conv(chn))
            self.mask_convs_y.append(self._tower_conv(chn))
            self.cls_convs.append(self._tower_conv(
                self.in_channels if i == 0 else self.feat_channels))
        self._init_predictors()

    def _init_predictors(self):
        self.conv_mask_list_x = nn.ModuleList(
            nn.Conv2d(self.feat_channels, g, 3, padding=1) for g in self.num_grids)
        self.conv_mask_list_y = nn.ModuleList(
            nn.Conv2d(self.feat_channels, g, 3, padding=1) for g in self.num_grids)
        self.conv_cls = nn.Conv2d(self.feat_channels, self.cls_out_channels, 3, padding=1)

    def forward_single(self, x, level):
        """``(mask_pred_x (B, G, 2h, 2w), mask_pred_y (B, G, 2h, 2w), cls_pred (B, C, G, G))``
        logits of one level."""
        coord = generate_coordinate(x.size(), x.device).to(x.dtype)
        feat_x = torch.cat([x, coord[:, 0:1]], 1)
        feat_y = torch.cat([x, coord[:, 1:2]], 1)
        for layer_x, layer_y in zip(self.mask_convs_x, self.mask_convs_y):
            feat_x = layer_x(feat_x)
            feat_y = layer_y(feat_y)
        feat_x = F.interpolate(feat_x, scale_factor=2, mode='bilinear')
        feat_y = F.interpolate(feat_y, scale_factor=2, mode='bilinear')
        return (self.conv_mask_list_x[level](feat_x), self.conv_mask_list_y[level](feat_y),
                self._cls_branch(x, level))

    def forward(self, feats):
        """Training: per-level logits ``(mask_preds_x, mask_preds_y, cls_preds)``. Test:
        sigmoids at each level's own size and locally-maximal class scores (mmdet
        upsampled the masks here; see :class:`SOLOHead`)."""
        self._check_levels(feats)
        preds_x, preds_y, cls_preds = super(SOLOHead, self).forward(self.resize_feats(feats))
        if not self.training:
            preds_x = [p.sigmoid() for p in preds_x]
            preds_y = [p.sigmoid() for p in preds_y]
            cls_preds = [self._local_max(c) for c in cls_preds]
        return preds_x, preds_y, cls_preds

    def loss(self, mlvl_mask_preds_x, mlvl_mask_preds_y, mlvl_cls_preds, gt_labels, gt_masks,
             img_metas, gt_bboxes=None, **kwargs):
        """``dict(loss_mask, loss_cls)`` as :meth:`SOLOHead.loss`, a positive cell's mask
        being ``sigmoid(y row) * sigmoid(x column)``."""
        featmap_sizes = [p.size()[-2:] for p in mlvl_mask_preds_x]
        targets, labels, _ = self._targets(gt_bboxes, gt_labels, gt_masks, featmap_sizes)
        num_imgs = len(gt_labels)
        num_pos = 0.
        loss_mask = []
        for lvl in range(self.num_levels):
            xy = [(labels[img][lvl] - self.num_classes).nonzero() for img in range(num_imgs)]
            pred_x = torch.cat([mlvl_mask_preds_x[lvl][img, xy[img][:, 1]]
                                for img in range(num_imgs)])
            pred_y = torch.cat([mlvl_mask_preds_y[lvl][img, xy[img][:, 0]]
                                for img in range(num_imgs)])
            if pred_x.size(0) == 0:  # keeps a graph through both branches, as mmdet
                loss_mask.append((pred_x.sum() + pred_y.sum()).unsqueeze(0))
                continue
            num_pos += pred_x.size(0)
            target = torch.cat([targets[img][lvl] for img in range(num_imgs)])
            loss_mask.append(self.loss_mask(pred_y.sigmoid() * pred_x.sigmoid(), target,
                                            reduction_override='none'))
        loss_mask = torch.cat(loss_mask)
        loss_mask = loss_mask.sum() / num_pos if num_pos > 0 else loss_mask.mean()
        return dict(loss_mask=loss_mask, loss_cls=self._loss_cls(mlvl_cls_preds, labels,
                                                                 num_pos))

    def get_results(self, mlvl_mask_preds_x, mlvl_mask_preds_y, mlvl_cls_scores, img_metas,
                    rescale=True, cfg=None, **kwargs):
        """Per image ``dict(scores, labels, masks)`` as :meth:`SOLOHead.get_results`."""
        cfg = self._test_cfg(cfg)
        featmap_size = tuple(mlvl_mask_preds_x[0].shape[-2:])
        results = []
        for img_id, meta in enumerate(img_metas):
            cls_scores = torch.cat([s[img_id].permute(1, 2, 0).reshape(-1, self.num_classes)
                                    for s in mlvl_cls_scores])

            def per_level(lvl, cells, img_id=img_id):
                grid = self.num_grids[lvl]
                map_x = self._resize(mlvl_mask_preds_x[lvl][img_id, cells % grid],
                                     featmap_size)
                map_y = self._resize(mlvl_mask_preds_y[lvl][img_id, cells // grid],
                                     featmap_size)
                return map_x * map_y

            def mask_fn(points, per_level=per_level):
                return self._gather_levels(points, per_level, featmap_size,
                                           mlvl_mask_preds_x[0])
            results.append(self._results_single(cls_scores, mask_fn, featmap_size, 4, meta,
                                                cfg, rescale))
        return results


@MODELS.register_module()
class DecoupledSOLOLightHead(DecoupledSOLOHead):
    """The light decoupled head (mmdet's): one mask tower for both branches; ``dcn_cfg``
    (e.g. ``dict(type='DCNv2')``) makes the last conv of both towers deformable."""

    def __init__(self, *args, dcn_cfg=None, init_cfg=_DECOUPLED_INIT, **kwargs):
        if dcn_cfg is not None and not isinstance(dcn_cfg, dict):
            raise TypeError(f'DecoupledSOLOLightHead dcn_cfg must be a dict or None, got '
                            f'{dcn_cfg!r}')
        self.dcn_cfg = dcn_cfg
        super().__init__(*args, init_cfg=init_cfg, **kwargs)

    def _init_layers(self):
        self.mask_convs = nn.ModuleList()
        self.cls_convs = nn.ModuleList()
        for i in range(self.stacked_convs):
            conv_cfg = self.dcn_cfg if i == self.stacked_convs - 1 else None
            self.mask_convs.append(self._tower_conv(
                self.in_channels + 2 if i == 0 else self.feat_channels, conv_cfg))
            self.cls_convs.append(self._tower_conv(
                self.in_channels if i == 0 else self.feat_channels, conv_cfg))
        self._init_predictors()

    def forward_single(self, x, level):
        mask_feat = self._with_coords(x)
        for layer in self.mask_convs:
            mask_feat = layer(mask_feat)
        mask_feat = F.interpolate(mask_feat, scale_factor=2, mode='bilinear')
        return (self.conv_mask_list_x[level](mask_feat),
                self.conv_mask_list_y[level](mask_feat), self._cls_branch(x, level))
