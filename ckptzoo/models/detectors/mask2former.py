"""mmdet 2.x ``Mask2Former``: :class:`MaskFormer` with a Mask2FormerHead (masked attention)."""
from ...registry import MODELS
from .maskformer import MaskFormer

__all__ = ['Mask2Former']


@MODELS.register_module()
class Mask2Former(MaskFormer):
    """Args as :class:`MaskFormer` (mmdet's)."""
