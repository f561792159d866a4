from .densenet import DenseNet
from .hrnet import HRModule, HRNet
from .swin import SwinTransformer, convert_official_swin, convert_torchvision_swin
from .resnet import BasicBlock, Bottleneck, ResNet, ResNetV1d
from .resnext import ResNeXt
from .regnet import RegNet
from .trident_resnet import TridentResNet
from .timm_backbone import TIMMBackbone

__all__ = ['DenseNet', 'HRModule', 'HRNet', 'SwinTransformer', 'convert_torchvision_swin',
           'convert_official_swin', 'BasicBlock', 'Bottleneck', 'ResNet', 'ResNetV1d',
           'ResNeXt', 'RegNet',
           'TridentResNet']
from .mobilenet_v2 import MobileNetV2  # noqa: E402
__all__ += ['MobileNetV2']
from .efficientnet import EfficientNet  # noqa: E402
__all__ += ['EfficientNet']
from .csp_darknet import CSPDarknet  # noqa: E402
from .darknet import Darknet  # noqa: E402
__all__ += ['CSPDarknet', 'Darknet']
from .ssd_vgg import SSDVGG  # noqa: E402
__all__ += ['SSDVGG']
from .pvt import PyramidVisionTransformer, PyramidVisionTransformerV2, pvt_convert  # noqa: E402
from .convnext import ConvNeXt  # noqa: E402

__all__ += ['PyramidVisionTransformer', 'PyramidVisionTransformerV2', 'pvt_convert', 'ConvNeXt']
__all__ += ['TIMMBackbone']
from .resnest import ResNeSt  # noqa: E402
from .res2net import Res2Net  # noqa: E402

__all__ += ['ResNeSt', 'Res2Net']
from .detectors_resnet import DetectoRS_ResNet  # noqa: E402
from .detectors_resnext import DetectoRS_ResNeXt  # noqa: E402

__all__ += ['DetectoRS_ResNet', 'DetectoRS_ResNeXt']
