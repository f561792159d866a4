from .compose import Compose
from .formatting import (Collect, DefaultFormatBundle, ImageToTensor, ToTensor,
                         to_tensor)
from .loading import LoadAnnotations, LoadImageFromFile, LoadImageFromWebcam
from .test_time_aug import MultiScaleFlipAug
from .transforms import Normalize, Pad, RandomFlip, Resize, SegRescale

__all__ = ['Compose', 'Collect', 'DefaultFormatBundle', 'ImageToTensor', 'ToTensor',
           'to_tensor', 'LoadAnnotations', 'LoadImageFromFile', 'LoadImageFromWebcam',
           'MultiScaleFlipAug',
           'Normalize', 'Pad', 'RandomFlip', 'Resize', 'SegRescale']
