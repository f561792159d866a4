from .resnet import BasicBlock, Bottleneck, ResLayer, ResNet, ResNetV1d

__all__ = ['BasicBlock', 'Bottleneck', 'ResLayer', 'ResNet', 'ResNetV1d']
