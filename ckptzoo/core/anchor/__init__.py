"""Anchor generation (mmdet 2.x ``mmdet/core/anchor``)."""
from .anchor_generator import AnchorGenerator
from .utils import anchor_inside_flags, images_to_levels

__all__ = ['AnchorGenerator', 'anchor_inside_flags', 'images_to_levels']
