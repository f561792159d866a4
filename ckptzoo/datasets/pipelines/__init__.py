from .compose import Compose
from .formatting import (Collect, DefaultFormatBundle, ImageToTensor, ToDataContainer,
                         ToTensor, to_tensor)
from .loading import LoadAnnotations, LoadImageFromFile, LoadImageFromWebcam, LoadProposals
from .test_time_aug import MultiScaleFlipAug
from .transforms import Normalize, Pad, RandomFlip, Resize, SegRescale

__all__ = ['Compose', 'Collect', 'DefaultFormatBundle', 'ImageToTensor', 'ToDataContainer',
           'ToTensor', 'to_tensor', 'LoadAnnotations', 'LoadImageFromFile', 'LoadImageFromWebcam',
           'LoadProposals',
           'MultiScaleFlipAug',
           'Normalize', 'Pad', 'RandomFlip', 'Resize', 'SegRescale']

# SSD's augmentations (kept apart: the lines above are shared edits)
from .ssd_augment import Expand, MinIoURandomCrop, PhotoMetricDistortion  # noqa: E402

__all__ += ['Expand', 'MinIoURandomCrop', 'PhotoMetricDistortion']

from .loading import FilterAnnotations  # noqa: E402
from .mix_transforms import MixUp, Mosaic  # noqa: E402
from .yolox_aug import RandomAffine, YOLOXHSVRandomAug  # noqa: E402

__all__ += ['FilterAnnotations', 'MixUp', 'Mosaic', 'RandomAffine', 'YOLOXHSVRandomAug']
from .loading import LoadPanopticAnnotations  # noqa: E402

__all__ += ['LoadPanopticAnnotations']

from .auto_augment import AutoAugment  # noqa: E402
from .random_crop import RandomCrop  # noqa: E402

__all__ += ['AutoAugment', 'RandomCrop']
from .auto_augment import (BrightnessTransform, ColorTransform, ContrastTransform,  # noqa: E402
                           EqualizeTransform)

__all__ += ['BrightnessTransform', 'ColorTransform', 'ContrastTransform', 'EqualizeTransform']
from .auto_augment_geometric import Rotate, Shear, Translate  # noqa: E402

__all__ += ['Rotate', 'Shear', 'Translate']
from .copy_paste import CopyPaste  # noqa: E402

__all__ += ['CopyPaste']
