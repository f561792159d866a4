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
from .resnest import ResNeSt  # noqa: E402
from .res2net import Res2Net  # noqa: E402

__all__ += ['ResNeSt', 'Res2Net']
