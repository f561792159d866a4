"""mmdet 2.x ``models/plugins``: the pixel decoders of MaskFormer and Mask2Former."""
from .msdeformattn_pixel_decoder import MSDeformAttnPixelDecoder
from .pixel_decoder import PixelDecoder, TransformerEncoderPixelDecoder

__all__ = ['PixelDecoder', 'TransformerEncoderPixelDecoder', 'MSDeformAttnPixelDecoder']
