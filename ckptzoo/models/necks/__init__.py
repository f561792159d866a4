from .bfp import BFP
from .fpn import FPN

__all__ = ['BFP', 'FPN']
