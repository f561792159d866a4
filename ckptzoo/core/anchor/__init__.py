"""Anchor generation (mmdet 2.x ``mmdet/core/anchor``)."""
from .anchor_generator import AnchorGenerator, LegacyAnchorGenerator
from .point_generator import MlvlPointGenerator, PointGenerator
from .utils import anchor_inside_flags, images_to_levels

__all__ = ['AnchorGenerator', 'LegacyAnchorGenerator', 'MlvlPointGenerator', 'PointGenerator', 'anchor_inside_flags', 'images_to_levels']

# SSD's and YOLOv3's prior generators (kept apart: the lines above are shared edits)
from .ssd_anchor_generator import LegacySSDAnchorGenerator, SSDAnchorGenerator  # noqa: E402
from .yolo_anchor_generator import YOLOAnchorGenerator  # noqa: E402

__all__ += ['LegacySSDAnchorGenerator', 'SSDAnchorGenerator', 'YOLOAnchorGenerator']

from .utils import calc_region  # noqa: E402

__all__ += ['calc_region']
