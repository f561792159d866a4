from .bfp import BFP
from .fpn import FPN
from .hrfpn import HRFPN

__all__ = ['BFP', 'FPN', 'HRFPN']
from .ssd_neck import SSDNeck  # noqa: E402
from .yolo_neck import YOLOV3Neck  # noqa: E402
from .yolox_pafpn import YOLOXPAFPN  # noqa: E402
__all__ += ['SSDNeck', 'YOLOV3Neck', 'YOLOXPAFPN']

from .channel_mapper import ChannelMapper  # noqa: E402
from .ct_resnet_neck import CTResNetNeck  # noqa: E402
from .dilated_encoder import DilatedEncoder  # noqa: E402
from .fpg import FPG  # noqa: E402
from .fpn_carafe import FPN_CARAFE  # noqa: E402
from .nas_fpn import NASFPN  # noqa: E402
from .nasfcos_fpn import NASFCOS_FPN  # noqa: E402
from .pafpn import PAFPN  # noqa: E402

__all__ += ['ChannelMapper', 'CTResNetNeck', 'DilatedEncoder', 'FPG', 'FPN_CARAFE', 'NASFPN',
            'NASFCOS_FPN', 'PAFPN']
from .rfp import ASPP, RFP  # noqa: E402

__all__ += ['ASPP', 'RFP']
