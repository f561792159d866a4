"""Data structures shared by the data pipeline and the models (a low layer: it imports
neither)."""
from .masks import (BitmapMasks, PolygonMasks, bitmap_to_polygon, encode_mask_results,
                    poly2mask, polygon_to_bitmap)

__all__ = ['BitmapMasks', 'PolygonMasks', 'bitmap_to_polygon', 'encode_mask_results',
           'poly2mask', 'polygon_to_bitmap']
