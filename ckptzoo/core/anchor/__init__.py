"""Anchor generation (mmdet 2.x ``mmdet/core/anchor``)."""
from .anchor_generator import AnchorGenerator, LegacyAnchorGenerator
from .utils import anchor_inside_flags, images_to_levels

__all__ = ['AnchorGenerator', 'LegacyAnchorGenerator', 'anchor_inside_flags', 'images_to_levels']

from .utils import calc_region  # noqa: E402

__all__ += ['calc_region']
