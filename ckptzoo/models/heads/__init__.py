from .anchor_head import AnchorHead
from .retina_head import RetinaHead

__all__ = ['AnchorHead', 'RetinaHead']
