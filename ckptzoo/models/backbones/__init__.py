from .densenet import DenseNet
from .hrnet import HRModule, HRNet
from .swin import SwinTransformer, convert_official_swin, convert_torchvision_swin
from .resnet import BasicBlock, Bottleneck, ResNet, ResNetV1d
from .resnext import ResNeXt
from .regnet import RegNet
from .trident_resnet import TridentResNet

__all__ = ['DenseNet', 'HRModule', 'HRNet', 'SwinTransformer', 'convert_torchvision_swin',
           'convert_official_swin', 'BasicBlock', 'Bottleneck', 'ResNet', 'ResNetV1d',
           'ResNeXt', 'RegNet',
           'TridentResNet']
from .detectors_resnet import DetectoRS_ResNet  # noqa: E402
from .detectors_resnext import DetectoRS_ResNeXt  # noqa: E402

__all__ += ['DetectoRS_ResNet', 'DetectoRS_ResNeXt']
