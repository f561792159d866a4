"""mmdet 2.x ``SingleRoIExtractor``: each RoI's features from the one pyramid level its size
maps to (FPN's rule), by an RoI layer per level.

Two fixes over mmdet, both leaving its results otherwise equal: with a single input level mmdet
ignored ``roi_scale_factor``; here it applies. A level that no RoI maps to stays in the autograd
graph with a zero gradient (mmdet adds ``feats[i].sum() * 0``, which turns an inf in that level
into NaN features for every RoI; here an empty slice of the level is added instead).
"""
import difflib

import torch
import torch.nn as nn

from ....ops import (DeformRoIPoolPack, ModulatedDeformRoIPoolPack, RoIAlign,
                     SimpleRoIAlign)
from ....registry import MODELS
from ....runner.fp16 import force_fp32
from ...utils.pretrained import check_pretrained_cfg, load_pretrained

__all__ = ['SingleRoIExtractor', 'ROI_LAYERS']

#: the RoI layers ``roi_layer=dict(type=...)`` may name (mmcv's ``mmcv.ops`` names)
ROI_LAYERS = {'RoIAlign': RoIAlign, 'SimpleRoIAlign': SimpleRoIAlign,
              'DeformRoIPoolPack': DeformRoIPoolPack,
              'ModulatedDeformRoIPoolPack': ModulatedDeformRoIPoolPack}


@MODELS.register_module()
class SingleRoIExtractor(nn.Module):
    """Args as mmdet 2.x:
        roi_layer (dict): ``dict(type='RoIAlign', output_size=7, sampling_ratio=0,
            aligned=True)``; built once per level with ``spatial_scale=1 / stride``. The
            deformable ``DeformRoIPoolPack`` / ``ModulatedDeformRoIPoolPack`` learn their
            offsets, so each level has its own weights (``roi_layers.{i}.offset_fc``).
        out_channels (int): channels of the features (and of the output).
        featmap_strides (list[int]): the stride of each input level.
        finest_scale (int): RoIs with ``sqrt(w * h) < 2 * finest_scale`` go to level 0,
            each doubling to the next level.
        init_cfg (dict | None): only ``Pretrained`` (the extractor has no weights).
    """

    def __init__(self, roi_layer, out_channels, featmap_strides, finest_scale=56,
                 init_cfg=None):
        super().__init__()
        if not (isinstance(featmap_strides, (list, tuple)) and featmap_strides):
            raise ValueError(f'featmap_strides must be a non-empty list of strides, got '
                             f'{featmap_strides!r}')
        self.roi_layers = self.build_roi_layers(roi_layer, featmap_strides)
        self.out_channels = out_channels
        self.featmap_strides = list(featmap_strides)
        self.finest_scale = finest_scale
        self.init_cfg = check_pretrained_cfg(init_cfg, type(self).__name__)
        self.fp16_enabled = False

    @property
    def num_inputs(self):
        """The number of input levels."""
        return len(self.featmap_strides)

    def build_roi_layers(self, layer_cfg, featmap_strides):
        if not isinstance(layer_cfg, dict) or 'type' not in layer_cfg:
            raise ValueError(f"roi_layer must be a dict with a type, e.g. dict(type='RoIAlign', "
                             f'output_size=7, sampling_ratio=0), got {layer_cfg!r}')
        cfg = dict(layer_cfg)
        layer_type = cfg.pop('type')
        if layer_type not in ROI_LAYERS:
            close = difflib.get_close_matches(str(layer_type), list(ROI_LAYERS), n=3)
            raise NotImplementedError(f'roi_layer type {layer_type!r} is not supported; '
                                      f'supported: {", ".join(ROI_LAYERS)}'
                                      + (f' (did you mean {close[0]}?)' if close else ''))
        return nn.ModuleList([ROI_LAYERS[layer_type](spatial_scale=1 / s, **cfg)
                              for s in featmap_strides])

    def init_weights(self):
        load_pretrained(self, self.init_cfg, type(self).__name__)

    def roi_rescale(self, rois, scale_factor):
        """RoIs scaled by ``scale_factor`` about their centres."""
        cx = (rois[:, 1] + rois[:, 3]) * 0.5
        cy = (rois[:, 2] + rois[:, 4]) * 0.5
        w = (rois[:, 3] - rois[:, 1]) * scale_factor
        h = (rois[:, 4] - rois[:, 2]) * scale_factor
        return torch.stack((rois[:, 0], cx - w * 0.5, cy - h * 0.5, cx + w * 0.5,
                            cy + h * 0.5), dim=-1)

    def map_roi_levels(self, rois, num_levels):
        """Level of each RoI: ``floor(log2(sqrt(w * h) / finest_scale + 1e-6))`` clamped to
        ``[0, num_levels - 1]``."""
        scale = torch.sqrt((rois[:, 3] - rois[:, 1]) * (rois[:, 4] - rois[:, 2]))
        target_lvls = torch.floor(torch.log2(scale / self.finest_scale + 1e-6))
        return target_lvls.clamp(min=0, max=num_levels - 1).long()

    @force_fp32(apply_to=('feats', ), out_fp16=True)
    def forward(self, feats, rois, roi_scale_factor=None):
        """``feats``: per-level ``[B, C, H, W]`` (the first ``len(feats)`` strides);
        ``rois [K, 5]`` -> ``[K, out_channels, *output_size]``."""
        num_levels = len(feats)
        if not 0 < num_levels <= len(self.roi_layers):
            raise ValueError(f'SingleRoIExtractor has {len(self.roi_layers)} levels '
                             f'(featmap_strides {self.featmap_strides}), got {num_levels} '
                             f'feature maps')
        out_size = self.roi_layers[0].output_size
        roi_feats = feats[0].new_zeros(rois.size(0), self.out_channels, *out_size)
        if num_levels == 1:
            if len(rois) == 0:
                return roi_feats
            if roi_scale_factor is not None:
                rois = self.roi_rescale(rois, roi_scale_factor)
            return self.roi_layers[0](feats[0], rois)
        target_lvls = self.map_roi_levels(rois, num_levels)
        if roi_scale_factor is not None:
            rois = self.roi_rescale(rois, roi_scale_factor)
        for i in range(num_levels):
            inds = (target_lvls == i).nonzero(as_tuple=False).squeeze(1)
            if inds.numel() > 0:
                roi_feats[inds] = self.roi_layers[i](feats[i], rois[inds])
            else:  # keep the level (and learnt RoI layers) in the graph: DDP expects
                # every level and parameter to get a gradient
                roi_feats = roi_feats + feats[i].reshape(-1)[:0].sum() + sum(
                    p.reshape(-1)[:0].sum() for p in self.parameters())
        return roi_feats
