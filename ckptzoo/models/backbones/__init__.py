from .densenet import DenseNet
from .hrnet import HRModule, HRNet
from .swin import SwinTransformer, convert_official_swin, convert_torchvision_swin
from .resnet import BasicBlock, Bottleneck, ResNet, ResNetV1d
from .resnext import ResNeXt
from .regnet import RegNet
from .trident_resnet import TridentResNet
from .timm_backbone import TIMMBackbone
from .mobilenet_v2 import MobileNetV2
from .efficientnet import EfficientNet
from .csp_darknet import CSPDarknet
from .darknet import Darknet
from .ssd_vgg import SSDVGG
from .pvt import PyramidVisionTransformer, PyramidVisionTransformerV2, pvt_convert
from .convnext import ConvNeXt
from .resnest import ResNeSt
from .res2net import Res2Net
from .detectors_resnet import DetectoRS_ResNet
from .detectors_resnext import DetectoRS_ResNeXt

__all__ = ['DenseNet', 'HRModule', 'HRNet', 'SwinTransformer', 'convert_torchvision_swin',
           'convert_official_swin', 'BasicBlock', 'Bottleneck', 'ResNet', 'ResNetV1d',
           'ResNeXt', 'RegNet', 'TridentResNet', 'TIMMBackbone', 'MobileNetV2', 'EfficientNet',
           'CSPDarknet', 'Darknet', 'SSDVGG', 'PyramidVisionTransformer',
           'PyramidVisionTransformerV2', 'pvt_convert', 'ConvNeXt', 'ResNeSt', 'Res2Net',
           'DetectoRS_ResNet', 'DetectoRS_ResNeXt']
from .hourglass import HourglassNet  # noqa: E402

__all__ += ['HourglassNet']
