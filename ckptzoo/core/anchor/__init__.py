"""Anchor generation (mmdet 2.x ``mmdet/core/anchor``)."""
from .anchor_generator import AnchorGenerator, LegacyAnchorGenerator
from .point_generator import MlvlPointGenerator, PointGenerator
from .utils import anchor_inside_flags, images_to_levels

__all__ = ['AnchorGenerator', 'LegacyAnchorGenerator', 'MlvlPointGenerator', 'PointGenerator', 'anchor_inside_flags', 'images_to_levels']
