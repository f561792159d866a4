from .image import imshow_det_bboxes, imwrite
from .palette import get_palette, palette_val

__all__ = ['imshow_det_bboxes', 'imwrite', 'get_palette', 'palette_val']
