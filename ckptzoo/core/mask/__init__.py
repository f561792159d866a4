"""Instance masks (mmdet 2.x ``mmdet/core/mask``): the structures the data pipeline and the mask
head share, the mask head's targets, the test loop's encoding."""
from .mask_target import mask_target
from .structures import (BaseInstanceMasks, BitmapMasks, PolygonMasks, bitmap_to_polygon,
                         poly2mask, polygon_to_bitmap)
from .utils import encode_mask_results

__all__ = ['BaseInstanceMasks', 'BitmapMasks', 'PolygonMasks', 'bitmap_to_polygon', 'encode_mask_results',
           'mask_target', 'poly2mask', 'polygon_to_bitmap']

from .utils import mask2bbox  # noqa: E402

__all__ += ['mask2bbox']
