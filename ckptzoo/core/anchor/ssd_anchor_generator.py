"""mmdet 2.x ``SSDAnchorGenerator`` and ``LegacySSDAnchorGenerator``: SSD's priors.

Per level two square anchors (``min_size`` and ``sqrt(min_size * max_size)``) and, for each
``r`` of ``ratios[level]``, the pair ``1/r``, ``r`` at ``min_size``: ``2 + 2 * len(ratios)``
anchors per position, in mmdet's order (square min, square sqrt(min*max), then the ratio
pairs), centred on the middle of each stride cell. The order and the sizes are what an mmdet
SSD checkpoint's output channels were trained against. (mmdet keeps these classes in
``anchor_generator.py``; they sit in their own module here so that the shared file stays as
it is.)
"""
import numpy as np
import torch
from torch.nn.modules.utils import _pair

from ...registry import TASK_UTILS
from .anchor_generator import AnchorGenerator

__all__ = ['SSDAnchorGenerator', 'LegacySSDAnchorGenerator', 'ssd_anchor_sizes']

# the first level's (min, max) size in percent of input_size that mmdet hard-codes, by
# (input_size, basesize_ratio_range[0])
_FIRST_LEVEL = {(300, 0.15): (7, 15), (300, 0.2): (10, 20),
                (512, 0.1): (4, 10), (512, 0.15): (7, 15)}


def ssd_anchor_sizes(input_size, basesize_ratio_range, num_levels):
    """mmdet's ``(min_sizes, max_sizes)`` from ``basesize_ratio_range``: the ratios in whole
    percent (``int(r * 100)``, truncated as mmdet does, so 0.29 gives 28) stepped evenly over
    levels 2.., the first level hard-coded for SSD300 / SSD512 (COCO and VOC settings)."""
    if input_size not in (300, 512):
        raise ValueError(f'SSDAnchorGenerator without min_sizes / max_sizes supports '
                         f'input_size 300 or 512, got {input_size!r}')
    if (not isinstance(basesize_ratio_range, (tuple, list)) or len(basesize_ratio_range) != 2
            or not all(isinstance(r, (int, float)) for r in basesize_ratio_range)):
        raise ValueError(f'basesize_ratio_range must be a (min, max) pair of floats, got '
                         f'{basesize_ratio_range!r}')
    if num_levels < 3:
        raise ValueError(f'SSDAnchorGenerator without min_sizes / max_sizes needs at least 3 '
                         f'levels, got {num_levels}')
    first = _FIRST_LEVEL.get((input_size, basesize_ratio_range[0]))
    if first is None:
        allowed = [r for s, r in _FIRST_LEVEL if s == input_size]
        raise ValueError(f'basesize_ratio_range[0] must be one of {allowed} when input_size is '
                         f'{input_size} (or give min_sizes and max_sizes), got '
                         f'{basesize_ratio_range[0]!r}')
    min_ratio = int(basesize_ratio_range[0] * 100)
    max_ratio = int(basesize_ratio_range[1] * 100)
    step = int(np.floor(max_ratio - min_ratio) / (num_levels - 2))
    if step <= 0:
        raise ValueError(f'basesize_ratio_range {basesize_ratio_range!r} is too narrow for '
                         f'{num_levels} levels')
    min_sizes = [int(input_size * first[0] / 100)]
    max_sizes = [int(input_size * first[1] / 100)]
    for ratio in range(min_ratio, max_ratio + 1, step):
        min_sizes.append(int(input_size * ratio / 100))
        max_sizes.append(int(input_size * (ratio + step) / 100))
    return min_sizes, max_sizes


@TASK_UTILS.register_module()
class SSDAnchorGenerator(AnchorGenerator):
    """SSD anchors (Liu et al. 2016).

    Args:
        strides (list[int | tuple[int, int]]): per level.
        ratios (list[list[float]]): per level, the extra aspect ratios ``r`` (each gives
            ``1/r`` and ``r``).
        min_sizes, max_sizes (list[float] | None): per level; both or neither. Without them
            the sizes come from ``basesize_ratio_range`` and ``input_size`` (300 or 512).
        basesize_ratio_range (tuple[float, float]): smallest and largest anchor size of
            levels 2.. as fractions of ``input_size``.
        input_size (int): 300 (SSD300) or 512 (SSD512).
        scale_major (bool): as :class:`AnchorGenerator`; SSD configs set False.
    """

    def __init__(self, strides, ratios, min_sizes=None, max_sizes=None,
                 basesize_ratio_range=(0.15, 0.9), input_size=300, scale_major=True):
        if len(strides) != len(ratios):
            raise ValueError(f'strides and ratios need one entry per level, got {len(strides)} '
                             f'and {len(ratios)}')
        if (min_sizes is None) != (max_sizes is None):
            raise ValueError(f'give both min_sizes and max_sizes or neither, got min_sizes='
                             f'{min_sizes!r}, max_sizes={max_sizes!r}')
        self.strides = [_pair(s) for s in strides]
        self.centers = [(s[0] / 2., s[1] / 2.) for s in self.strides]
        self.input_size = input_size
        self.basesize_ratio_range = basesize_ratio_range
        if min_sizes is None:
            min_sizes, max_sizes = ssd_anchor_sizes(input_size, basesize_ratio_range,
                                                    len(self.strides))
        if not len(min_sizes) == len(max_sizes) == len(self.strides):
            raise ValueError(f'min_sizes and max_sizes need one entry per stride '
                             f'({len(self.strides)}), got {len(min_sizes)} and '
                             f'{len(max_sizes)}')
        self.scales, self.ratios = [], []
        for k in range(len(self.strides)):
            anchor_ratios = [1.]
            for r in ratios[k]:
                anchor_ratios += [1 / r, r]
            self.ratios.append(torch.Tensor(anchor_ratios))
            self.scales.append(torch.Tensor([1., np.sqrt(max_sizes[k] / min_sizes[k])]))
        self.min_sizes, self.max_sizes = list(min_sizes), list(max_sizes)
        self.base_sizes = list(min_sizes)
        self.scale_major = scale_major
        self.center_offset = 0
        self.octave_base_scale = self.scales_per_octave = None
        self.base_anchors = self.gen_base_anchors()

    def gen_base_anchors(self):
        """Per level the base anchors in mmdet's order: (ratio 1, scale 1), (ratio 1, scale
        sqrt(max/min)), then the other ratios at scale 1."""
        anchors = []
        for i, base_size in enumerate(self.base_sizes):
            level = self.gen_single_level_base_anchors(base_size, self.scales[i],
                                                       self.ratios[i], self.centers[i])
            order = list(range(len(self.ratios[i])))
            order.insert(1, len(order))
            anchors.append(level[torch.LongTensor(order)])
        return anchors

    def __repr__(self):
        return (f'{type(self).__name__}(strides={self.strides}, base_sizes={self.base_sizes}, '
                f'max_sizes={self.max_sizes}, ratios={[r.tolist() for r in self.ratios]}, '
                f'scale_major={self.scale_major}, input_size={self.input_size}, '
                f'basesize_ratio_range={self.basesize_ratio_range})')


@TASK_UTILS.register_module()
class LegacySSDAnchorGenerator(SSDAnchorGenerator):
    """mmdet 1.x SSD anchors (``configs/legacy_1.x/ssd300_coco_v1.py``): centred at
    ``(stride - 1) / 2``, widths and heights less 1, corners rounded (as
    :class:`LegacyAnchorGenerator`). Args as :class:`SSDAnchorGenerator` without
    ``min_sizes`` / ``max_sizes`` (mmdet's signature)."""

    def __init__(self, strides, ratios, basesize_ratio_range, input_size=300,
                 scale_major=True):
        super().__init__(strides=strides, ratios=ratios,
                         basesize_ratio_range=basesize_ratio_range, input_size=input_size,
                         scale_major=scale_major)
        self.centers = [((s[0] - 1) / 2., (s[1] - 1) / 2.) for s in self.strides]
        self.base_anchors = self.gen_base_anchors()

    def gen_single_level_base_anchors(self, base_size, scales, ratios, center=None):
        x_center, y_center = center
        h_ratios = torch.sqrt(ratios)
        w_ratios = 1 / h_ratios
        if self.scale_major:
            ws = (base_size * w_ratios[:, None] * scales[None, :]).view(-1)
            hs = (base_size * h_ratios[:, None] * scales[None, :]).view(-1)
        else:
            ws = (base_size * scales[:, None] * w_ratios[None, :]).view(-1)
            hs = (base_size * scales[:, None] * h_ratios[None, :]).view(-1)
        return torch.stack([x_center - 0.5 * (ws - 1), y_center - 0.5 * (hs - 1),
                            x_center + 0.5 * (ws - 1), y_center + 0.5 * (hs - 1)],
                           dim=-1).round()
