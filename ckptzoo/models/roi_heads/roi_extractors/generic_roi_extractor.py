"""mmdet 2.x ``GenericRoIExtractor`` (GRoIE, Rossi et al. 2020): every RoI pooled from *every*
level, each level's features through the shared ``pre_module``, aggregated by sum (or
concatenated along channels), then through ``post_module``.

Keys are mmdet's: ``post_module.*`` then ``pre_module.*`` (mmdet's registration order). The
plugin layers are mmcv's (:func:`~ckptzoo.models.utils.build_plugin_layer`), the GRoIE configs'
``GeneralizedAttention`` post module among them.

Fix over mmdet, which leaves its results otherwise equal: with a single input level mmdet
returned the RoI layer's output as it was (no ``roi_scale_factor``, no pre / post module);
here one level goes the way of many.
"""
import torch.nn as nn

from ....registry import MODELS
from ....runner.fp16 import force_fp32
from ...utils import build_plugin_layer
from ...utils.pretrained import check_pretrained_cfg
from .single_level_roi_extractor import SingleRoIExtractor

__all__ = ['GenericRoIExtractor']

_AGGREGATIONS = ('sum', 'concat')


@MODELS.register_module()
class GenericRoIExtractor(SingleRoIExtractor):
    """Args (mmdet 2.x's):
        aggregation (str): 'sum' or 'concat' (``out_channels`` must then be the levels'
            channels summed).
        pre_cfg, post_cfg (dict | None): plugin layers (``ConvModule``, ``NonLocal2d``,
            ``GeneralizedAttention``) applied
            to each level's RoI features / to the aggregate.
        roi_layer, out_channels, featmap_strides, init_cfg: as :class:`SingleRoIExtractor`
            (mmdet's ``BaseRoIExtractor``; no ``finest_scale``: no level mapping here).
    """

    def __init__(self, roi_layer, out_channels, featmap_strides, aggregation='sum',
                 pre_cfg=None, post_cfg=None, init_cfg=None):
        nn.Module.__init__(self)
        if aggregation not in _AGGREGATIONS:
            raise ValueError(f"GenericRoIExtractor aggregation must be 'sum' or 'concat', got "
                             f'{aggregation!r}')
        if not (isinstance(featmap_strides, (list, tuple)) and featmap_strides):
            raise ValueError(f'featmap_strides must be a non-empty list of strides, got '
                             f'{featmap_strides!r}')
        self.roi_layers = self.build_roi_layers(roi_layer, featmap_strides)
        self.out_channels = out_channels
        self.featmap_strides = list(featmap_strides)
        self.init_cfg = check_pretrained_cfg(init_cfg, type(self).__name__)
        self.fp16_enabled = False
        self.aggregation = aggregation
        self.with_post = post_cfg is not None
        self.with_pre = pre_cfg is not None
        if self.with_post:
            self.post_module = build_plugin_layer(post_cfg, '_post_module')[1]
        if self.with_pre:
            self.pre_module = build_plugin_layer(pre_cfg, '_pre_module')[1]

    def map_roi_levels(self, rois, num_levels):
        raise NotImplementedError('GenericRoIExtractor pools every RoI from every level')

    @force_fp32(apply_to=('feats', ), out_fp16=True)
    def forward(self, feats, rois, roi_scale_factor=None):
        """``feats``: per-level ``[B, C, H, W]``; ``rois [K, 5]`` ->
        ``[K, out_channels, *output_size]``."""
        num_levels = len(feats)
        if not 0 < num_levels <= len(self.roi_layers):
            raise ValueError(f'GenericRoIExtractor has {len(self.roi_layers)} levels '
                             f'(featmap_strides {self.featmap_strides}), got {num_levels} '
                             f'feature maps')
        out_size = self.roi_layers[0].output_size
        roi_feats = feats[0].new_zeros(rois.size(0), self.out_channels, *out_size)
        if roi_feats.shape[0] == 0:
            return roi_feats
        if roi_scale_factor is not None:
            rois = self.roi_rescale(rois, roi_scale_factor)
        start = 0
        for i in range(num_levels):
            level_feats = self.roi_layers[i](feats[i], rois)
            end = start + level_feats.size(1)
            if self.with_pre:
                level_feats = self.pre_module(level_feats)
            if self.aggregation == 'sum':
                roi_feats = roi_feats + level_feats
            else:
                roi_feats[:, start:end] = level_feats
            start = end
        if self.aggregation == 'concat' and start != self.out_channels:
            raise ValueError(f"GenericRoIExtractor aggregation='concat' made {start} channels, "
                             f'out_channels is {self.out_channels}')
        if self.with_post:
            roi_feats = self.post_module(roi_feats)
        return roi_feats
