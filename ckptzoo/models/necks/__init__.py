from .bfp import BFP
from .fpn import FPN
from .hrfpn import HRFPN

__all__ = ['BFP', 'FPN', 'HRFPN']
from .rfp import ASPP, RFP  # noqa: E402

__all__ += ['ASPP', 'RFP']
