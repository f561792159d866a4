from .bfp import BFP
from .fpn import FPN
from .hrfpn import HRFPN

__all__ = ['BFP', 'FPN', 'HRFPN']
