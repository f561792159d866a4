"""mmcv 1.x's deformable RoI pooling (``DeformRoIPool``, DCN's ``DeformRoIPoolPack`` and
DCNv2's ``ModulatedDeformRoIPoolPack``) in plain PyTorch.

The sampling is mmcv's kernel: a RoI's corners are ``x * spatial_scale - 0.5`` (no rounding,
no minimum size), each of the ``output_size`` bins is shifted by ``gamma * roi size * offset``
and averages a ``sampling_ratio`` x ``sampling_ratio`` grid of bilinear samples (0: adaptive,
``ceil(roi size / output size)`` per RoI); a sample more than one pixel outside the map is
0, one within a pixel of the border reads the border. The samples come from
``grid_sample`` (border padding, then the outside mask), so autograd gives the gradients of
the input and the offsets without storing a copy of the features per sample.

One fix over mmcv: its CUDA backward gives the offsets a gradient that is not the derivative
of its forward where a sample is clamped to the border (it uses the unclamped coordinate);
here the offsets get the true derivative. Inside the map the two are equal.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.modules.utils import _pair

__all__ = ['deform_roi_pool', 'DeformRoIPool', 'DeformRoIPoolPack',
           'ModulatedDeformRoIPoolPack']


def _sample(feat, ys, xs):
    """Bilinear samples of ``feat [C, H, W]`` at pixel coordinates ``ys, xs [K, P]`` with
    mmcv's border rules -> ``[K, C, P]``."""
    _, height, width = feat.shape
    gx = xs * (2.0 / max(width - 1, 1)) - 1.0
    gy = ys * (2.0 / max(height - 1, 1)) - 1.0
    grid = torch.stack((gx, gy), dim=-1)[None]  # [1, K, P, 2]
    val = F.grid_sample(feat[None], grid, mode='bilinear', padding_mode='border',
                        align_corners=True)[0]  # [C, K, P]
    inside = (ys >= -1.0) & (ys <= height) & (xs >= -1.0) & (xs <= width)
    return (val * inside.to(val.dtype)).transpose(0, 1)


def deform_roi_pool(input, rois, offset, output_size, spatial_scale=1.0, sampling_ratio=0,
                    gamma=0.1):
    """mmcv's ``deform_roi_pool``: ``input [B, C, H, W]``, ``rois [K, 5]`` (image index,
    x1, y1, x2, y2 in image pixels), ``offset [K, 2, *output_size]`` (x then y, in units of
    the RoI size over ``gamma``) or None -> ``[K, C, *output_size]``."""
    out_h, out_w = _pair(output_size)
    if rois.dim() != 2 or rois.size(1) != 5:
        raise ValueError(f'rois must be [K, 5] (idx, x1, y1, x2, y2), got {tuple(rois.shape)}')
    num_rois, channels = rois.size(0), input.size(1)
    if offset is not None and offset.numel() > 0 and \
            tuple(offset.shape) != (num_rois, 2, out_h, out_w):
        raise ValueError(f'offset must be [K, 2, {out_h}, {out_w}] = '
                         f'{(num_rois, 2, out_h, out_w)}, got {tuple(offset.shape)}')
    rois = rois.to(input.dtype)
    out = input.new_zeros(num_rois, channels, out_h, out_w)
    if num_rois == 0:
        return out + (offset.sum() * 0 if offset is not None else 0)
    start_w = rois[:, 1] * spatial_scale - 0.5
    start_h = rois[:, 2] * spatial_scale - 0.5
    roi_w = (rois[:, 3] * spatial_scale - 0.5) - start_w
    roi_h = (rois[:, 4] * spatial_scale - 0.5) - start_h
    bin_w, bin_h = roi_w / out_w, roi_h / out_h
    if sampling_ratio > 0:
        grid_h = torch.full_like(roi_h, sampling_ratio, dtype=torch.long)
        grid_w = grid_h
    else:
        grid_h, grid_w = torch.ceil(roi_h / out_h).long(), torch.ceil(roi_w / out_w).long()
    # bin origins [K, out_h, out_w], summed in the kernel's order: (start + offset) + p * bin
    sh, sw = start_h[:, None, None], start_w[:, None, None]
    if offset is not None and offset.numel() > 0:
        offset = offset.to(input.dtype)
        sh = sh + gamma * roi_h[:, None, None] * offset[:, 1]
        sw = sw + gamma * roi_w[:, None, None] * offset[:, 0]
    ph = torch.arange(out_h, dtype=input.dtype, device=input.device)[None, :, None]
    pw = torch.arange(out_w, dtype=input.dtype, device=input.device)[None, None, :]
    ys0 = sh + ph * bin_h[:, None, None]
    xs0 = sw + pw * bin_w[:, None, None]
    ys0, xs0 = ys0.expand(-1, out_h, out_w), xs0.expand(-1, out_h, out_w)
    ys0, xs0 = ys0.reshape(num_rois, -1), xs0.reshape(num_rois, -1)
    count = (grid_h * grid_w).clamp(min=1).to(input.dtype)
    # the kernel's samples of a bin, row by row: sample s is (s // grid_w, s % grid_w); a RoI
    # with a grid side <= 0 (degenerate box) has none
    samples = torch.where((grid_h > 0) & (grid_w > 0), grid_h * grid_w, 0)
    batch = rois[:, 0].long()
    pieces = []
    for b in torch.unique(batch).tolist():
        idx = (batch == b).nonzero(as_tuple=False).squeeze(1)
        acc = None
        gw, num = grid_w[idx].clamp(min=1), samples[idx]
        gh_f, gw_f = grid_h[idx].clamp(min=1).to(input.dtype), gw.to(input.dtype)
        for s in range(int(num.max())):
            iy, ix = (s // gw).to(input.dtype), (s % gw).to(input.dtype)
            ys = ys0[idx] + ((iy + 0.5) * bin_h[idx] / gh_f)[:, None]
            xs = xs0[idx] + ((ix + 0.5) * bin_w[idx] / gw_f)[:, None]
            val = _sample(input[b], ys, xs) * (s < num).to(input.dtype)[:, None, None]
            acc = val if acc is None else acc + val
        if acc is None:
            continue
        pieces.append((idx, acc / count[idx, None, None]))
    for idx, val in pieces:
        out = out.index_put((idx, ), val.view(-1, channels, out_h, out_w))
    return out


class DeformRoIPool(nn.Module):
    """Args as mmcv: ``output_size`` (int or (h, w)), ``spatial_scale`` (1 / stride),
    ``sampling_ratio`` (0: adaptive), ``gamma`` (the offsets' scale)."""

    def __init__(self, output_size, spatial_scale=1.0, sampling_ratio=0, gamma=0.1):
        super().__init__()
        if not (isinstance(sampling_ratio, int) and sampling_ratio >= 0):
            raise ValueError(f'{type(self).__name__} sampling_ratio must be an int >= 0 '
                             f'(0: adaptive), got {sampling_ratio!r}')
        self.output_size = _pair(output_size)
        self.spatial_scale = float(spatial_scale)
        self.sampling_ratio = sampling_ratio
        self.gamma = float(gamma)

    def forward(self, input, rois, offset=None):
        return deform_roi_pool(input, rois, offset, self.output_size, self.spatial_scale,
                               self.sampling_ratio, self.gamma)

    def extra_repr(self):
        return (f'output_size={self.output_size}, spatial_scale={self.spatial_scale}, '
                f'sampling_ratio={self.sampling_ratio}, gamma={self.gamma}')


def _fc(in_features, hidden, out_features, layers):
    """mmcv's offset/mask MLP: ``layers`` Linear layers with ReLUs between them."""
    mods = [nn.Linear(in_features, hidden), nn.ReLU(inplace=True)]
    for _ in range(layers - 2):
        mods += [nn.Linear(hidden, hidden), nn.ReLU(inplace=True)]
    mods.append(nn.Linear(hidden, out_features))
    nn.init.zeros_(mods[-1].weight)
    nn.init.zeros_(mods[-1].bias)
    return mods


class DeformRoIPoolPack(DeformRoIPool):
    """DCN's pooling that learns its offsets: a plain pooling (zero offsets) feeds
    ``offset_fc`` (three Linear layers, the last zero-initialised, so training starts from
    RoIAlign), whose offsets a second pooling uses. Args as mmcv: ``output_channels`` (the
    input's channels), ``deform_fc_channels`` and :class:`DeformRoIPool`'s."""

    def __init__(self, output_size, output_channels, deform_fc_channels=1024,
                 spatial_scale=1.0, sampling_ratio=0, gamma=0.1):
        super().__init__(output_size, spatial_scale, sampling_ratio, gamma)
        self.output_channels = output_channels
        self.deform_fc_channels = deform_fc_channels
        bins = self.output_size[0] * self.output_size[1]
        self.offset_fc = nn.Sequential(*_fc(bins * output_channels, deform_fc_channels,
                                            bins * 2, 3))

    def _check(self, input):
        if input.size(1) != self.output_channels:
            raise ValueError(f'{type(self).__name__} was built for output_channels='
                             f'{self.output_channels} input channels, got {input.size(1)}')

    def _offset(self, x):
        return self.offset_fc(x.flatten(1)).view(x.size(0), 2, *self.output_size)

    def forward(self, input, rois):
        self._check(input)
        x = super().forward(input, rois)
        return super().forward(input, rois, self._offset(x))


class ModulatedDeformRoIPoolPack(DeformRoIPoolPack):
    """DCNv2's pooling: :class:`DeformRoIPoolPack` whose output is weighted per bin by
    ``mask_fc`` (two Linear layers and a sigmoid, the last Linear zero-initialised: 0.5)."""

    def __init__(self, output_size, output_channels, deform_fc_channels=1024,
                 spatial_scale=1.0, sampling_ratio=0, gamma=0.1):
        super().__init__(output_size, output_channels, deform_fc_channels, spatial_scale,
                         sampling_ratio, gamma)
        bins = self.output_size[0] * self.output_size[1]
        self.mask_fc = nn.Sequential(*_fc(bins * output_channels, deform_fc_channels, bins, 2),
                                     nn.Sigmoid())

    def forward(self, input, rois):
        self._check(input)
        x = DeformRoIPool.forward(self, input, rois)
        offset = self._offset(x)
        mask = self.mask_fc(x.flatten(1)).view(x.size(0), 1, *self.output_size)
        return DeformRoIPool.forward(self, input, rois, offset) * mask
