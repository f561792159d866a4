"""mmdet 2.x ``AnchorGenerator``: the same anchors, in the same order, as mmdet 2.x.

Order within a level: positions row-major (y outer, x inner), and at each position the
``num_base_priors`` base anchors, ratio-major (``scale_major=True``: for each ratio, each scale).
This order is what a head's output channels are trained against, so it must not change.
"""
import numpy as np
import torch
from torch.nn.modules.utils import _pair

from ...registry import TASK_UTILS

__all__ = ['AnchorGenerator']


@TASK_UTILS.register_module()
class AnchorGenerator:
    """Square-grid anchors for multi-level feature maps.

    Args:
        strides (list[int | tuple[int, int]]): per level; a tuple is (stride_w, stride_h).
        ratios (list[float]): height / width ratios.
        scales (list[float]): anchor sizes relative to ``base_sizes``; or give
            ``octave_base_scale`` and ``scales_per_octave`` (RetinaNet:
            ``octave_base_scale * 2 ** (i / scales_per_octave)``).
        base_sizes (list[int]): per level; the smaller stride by default.
        scale_major (bool): order base anchors ratio-major (True) or scale-major (False).
        centers (list[tuple[float, float]]): per level base-anchor centre; default
            ``center_offset * base_size``.
        center_offset (float): in [0, 1].
    """

    def __init__(self, strides, ratios, scales=None, base_sizes=None, scale_major=True,
                 octave_base_scale=None, scales_per_octave=None, centers=None,
                 center_offset=0.):
        if not 0 <= center_offset <= 1:
            raise ValueError(f'center_offset must be in [0, 1], got {center_offset!r}')
        if center_offset != 0 and centers is not None:
            raise ValueError(f'give centers or a non-zero center_offset, not both '
                             f'(center_offset={center_offset!r})')
        if centers is not None and len(centers) != len(strides):
            raise ValueError(f'centers needs one entry per stride ({len(strides)}), '
                             f'got {centers!r}')
        self.strides = [_pair(s) for s in strides]
        self.base_sizes = [min(s) for s in self.strides] if base_sizes is None \
            else list(base_sizes)
        if len(self.base_sizes) != len(self.strides):
            raise ValueError(f'base_sizes needs one entry per stride ({len(self.strides)}), '
                             f'got {base_sizes!r}')
        octave = octave_base_scale is not None and scales_per_octave is not None
        if octave == (scales is not None):
            raise ValueError('give either scales or both octave_base_scale and '
                             f'scales_per_octave, got scales={scales!r}, octave_base_scale='
                             f'{octave_base_scale!r}, scales_per_octave={scales_per_octave!r}')
        if scales is None:
            scales = np.array([2**(i / scales_per_octave) for i in range(scales_per_octave)])
            scales = scales * octave_base_scale
        self.scales = torch.Tensor(np.asarray(scales, dtype=np.float64))
        self.octave_base_scale = octave_base_scale
        self.scales_per_octave = scales_per_octave
        self.ratios = torch.Tensor(ratios)
        self.scale_major = scale_major
        self.centers = centers
        self.center_offset = center_offset
        self.base_anchors = self.gen_base_anchors()

    @property
    def num_levels(self):
        return len(self.strides)

    @property
    def num_base_priors(self):
        """Anchors per position, per level."""
        return [a.size(0) for a in self.base_anchors]

    num_base_anchors = num_base_priors  # mmdet < 2.18 name

    def gen_base_anchors(self):
        return [self.gen_single_level_base_anchors(
            size, self.scales, self.ratios, None if self.centers is None else self.centers[i])
            for i, size in enumerate(self.base_sizes)]

    def gen_single_level_base_anchors(self, base_size, scales, ratios, center=None):
        w = h = base_size
        if center is None:
            x_center, y_center = self.center_offset * w, self.center_offset * h
        else:
            x_center, y_center = center
        h_ratios = torch.sqrt(ratios)
        w_ratios = 1 / h_ratios
        if self.scale_major:
            ws = (w * w_ratios[:, None] * scales[None, :]).view(-1)
            hs = (h * h_ratios[:, None] * scales[None, :]).view(-1)
        else:
            ws = (w * scales[:, None] * w_ratios[None, :]).view(-1)
            hs = (h * scales[:, None] * h_ratios[None, :]).view(-1)
        return torch.stack([x_center - 0.5 * ws, y_center - 0.5 * hs,
                            x_center + 0.5 * ws, y_center + 0.5 * hs], dim=-1)

    @staticmethod
    def _meshgrid(x, y, row_major=True):
        xx = x.repeat(y.shape[0])
        yy = y.view(-1, 1).repeat(1, x.shape[0]).view(-1)
        return (xx, yy) if row_major else (yy, xx)

    def _check_levels(self, featmap_sizes):
        if len(featmap_sizes) != self.num_levels:
            raise ValueError(f'need one feature map size per level ({self.num_levels} strides),'
                             f' got {len(featmap_sizes)}')

    def grid_priors(self, featmap_sizes, dtype=torch.float32, device='cpu'):
        """Per level, ``[H * W * num_base_priors, 4]`` anchors in input-image pixels."""
        self._check_levels(featmap_sizes)
        return [self.single_level_grid_priors(size, i, dtype=dtype, device=device)
                for i, size in enumerate(featmap_sizes)]

    def single_level_grid_priors(self, featmap_size, level_idx, dtype=torch.float32,
                                 device='cpu'):
        base_anchors = self.base_anchors[level_idx].to(device).to(dtype)
        feat_h, feat_w = featmap_size
        stride_w, stride_h = self.strides[level_idx]
        shift_x = torch.arange(0, feat_w, device=device).to(dtype) * stride_w
        shift_y = torch.arange(0, feat_h, device=device).to(dtype) * stride_h
        shift_xx, shift_yy = self._meshgrid(shift_x, shift_y)
        shifts = torch.stack([shift_xx, shift_yy, shift_xx, shift_yy], dim=-1)
        return (base_anchors[None, :, :] + shifts[:, None, :]).view(-1, 4)

    def grid_anchors(self, featmap_sizes, device='cpu'):
        """mmdet < 2.18 name of :meth:`grid_priors`."""
        return self.grid_priors(featmap_sizes, device=device)

    def valid_flags(self, featmap_sizes, pad_shape, device='cpu'):
        """Per level, a bool per anchor: False where its position lies beyond the padded image
        (feature maps of a batch are as large as the largest image)."""
        self._check_levels(featmap_sizes)
        h, w = pad_shape[:2]
        flags = []
        for i, (feat_h, feat_w) in enumerate(featmap_sizes):
            stride_w, stride_h = self.strides[i]
            valid_h = min(int(np.ceil(h / stride_h)), feat_h)
            valid_w = min(int(np.ceil(w / stride_w)), feat_w)
            flags.append(self.single_level_valid_flags(
                (feat_h, feat_w), (valid_h, valid_w), self.num_base_priors[i], device=device))
        return flags

    def single_level_valid_flags(self, featmap_size, valid_size, num_base_anchors,
                                 device='cpu'):
        feat_h, feat_w = featmap_size
        valid_h, valid_w = valid_size
        valid_x = torch.zeros(feat_w, dtype=torch.bool, device=device)
        valid_y = torch.zeros(feat_h, dtype=torch.bool, device=device)
        valid_x[:valid_w] = True
        valid_y[:valid_h] = True
        valid_xx, valid_yy = self._meshgrid(valid_x, valid_y)
        valid = valid_xx & valid_yy
        return valid[:, None].expand(valid.size(0), num_base_anchors).contiguous().view(-1)

    def __repr__(self):
        return (f'{type(self).__name__}(strides={self.strides}, ratios={self.ratios.tolist()}, '
                f'scales={self.scales.tolist()}, base_sizes={self.base_sizes}, '
                f'scale_major={self.scale_major}, centers={self.centers}, '
                f'center_offset={self.center_offset})')


@TASK_UTILS.register_module()
class LegacyAnchorGenerator(AnchorGenerator):
    """mmdet 2.x's ``LegacyAnchorGenerator``: the anchors of mmdet 1.x checkpoints
    (``configs/legacy_1.x``, with ``center_offset=0.5``): widths and heights less 1 (a box
    covers its last pixel), the centre at ``center_offset * (base_size - 1)``, corners
    rounded to whole pixels. Args as :class:`AnchorGenerator`."""

    def gen_single_level_base_anchors(self, base_size, scales, ratios, center=None):
        if center is None:
            center = (self.center_offset * (base_size - 1), ) * 2
        anchors = super().gen_single_level_base_anchors(base_size, scales, ratios, center)
        x_center, y_center = center
        half = (anchors[:, 2:] - anchors[:, :2] - 1) * 0.5  # (ws - 1) / 2, (hs - 1) / 2
        centre = anchors.new_tensor([x_center, y_center])
        return torch.cat([centre - half, centre + half], dim=-1).round()
