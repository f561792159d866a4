from .densenet import DenseNet
from .resnet import BasicBlock, Bottleneck, ResLayer, ResNet, ResNetV1d

__all__ = ['DenseNet', 'BasicBlock', 'Bottleneck', 'ResLayer', 'ResNet', 'ResNetV1d']
