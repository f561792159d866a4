from .bfp import BFP
from .fpn import FPN
from .hrfpn import HRFPN

__all__ = ['BFP', 'FPN', 'HRFPN']
from .ssd_neck import SSDNeck  # noqa: E402
from .yolo_neck import YOLOV3Neck  # noqa: E402
from .yolox_pafpn import YOLOXPAFPN  # noqa: E402
__all__ += ['SSDNeck', 'YOLOV3Neck', 'YOLOXPAFPN']
