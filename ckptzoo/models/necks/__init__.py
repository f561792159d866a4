from .bfp import BFP
from .fpn import FPN
from .hrfpn import HRFPN
from .ssd_neck import SSDNeck
from .yolo_neck import YOLOV3Neck
from .yolox_pafpn import YOLOXPAFPN
from .channel_mapper import ChannelMapper
from .ct_resnet_neck import CTResNetNeck
from .dilated_encoder import DilatedEncoder
from .fpg import FPG
from .fpn_carafe import FPN_CARAFE
from .nas_fpn import NASFPN
from .nasfcos_fpn import NASFCOS_FPN
from .pafpn import PAFPN
from .rfp import ASPP, RFP

__all__ = ['BFP', 'FPN', 'HRFPN', 'SSDNeck', 'YOLOV3Neck', 'YOLOXPAFPN', 'ChannelMapper',
           'CTResNetNeck', 'DilatedEncoder', 'FPG', 'FPN_CARAFE', 'NASFPN', 'NASFCOS_FPN',
           'PAFPN', 'ASPP', 'RFP']

from .dyhead import DyHead  # noqa: E402

__all__ += ['DyHead']
