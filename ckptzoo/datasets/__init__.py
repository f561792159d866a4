from .builder import (DistributedGroupSampler, DistributedSampler, GroupSampler,
                      build_dataloader, build_dataset, collate, sync_random_seed,
                      worker_init_fn)
from .classification import (BaseClassificationDataset, ImageFolderDataset,
                             SyntheticClassificationDataset)
from .coco import CocoDataset
from .custom import CustomDataset
from .dataset_wrappers import ConcatDataset, RepeatDataset
from .pipelines import *  # noqa: F401,F403
from .sample_seed import SeededIndex, sample_rng, sample_seed
from .stand_in import StandInDataset
from .synthetic_coco import generate_coco
from .synthetic_voc import SYNTHETIC_CLASSES, generate_voc
from .voc import VOCDataset, XMLDataset

__all__ = ['DistributedGroupSampler', 'DistributedSampler', 'GroupSampler', 'SeededIndex',
           'sample_rng', 'sample_seed', 'build_dataloader', 'build_dataset',
           'collate', 'sync_random_seed', 'worker_init_fn', 'BaseClassificationDataset', 'ImageFolderDataset',
           'SyntheticClassificationDataset', 'CocoDataset', 'CustomDataset', 'ConcatDataset',
           'RepeatDataset', 'StandInDataset',
           'SYNTHETIC_CLASSES', 'generate_coco', 'generate_voc', 'VOCDataset', 'XMLDataset']
from .wider_face import WIDERFaceDataset  # noqa: E402
from .synthetic_wider_face import generate_wider_face  # noqa: E402

__all__ += ['WIDERFaceDataset', 'generate_wider_face']
from .deepfashion import DeepFashionDataset  # noqa: E402
from .objects365 import Objects365V1Dataset, Objects365V2Dataset  # noqa: E402
from .cityscapes import CityscapesDataset  # noqa: E402

__all__ += ['DeepFashionDataset', 'Objects365V1Dataset', 'Objects365V2Dataset',
            'CityscapesDataset']
from .synthetic_coco_variants import generate_coco_variant  # noqa: E402

__all__ += ['generate_coco_variant']
from .lvis import LVISV05Dataset, LVISV1Dataset  # noqa: E402

__all__ += ['LVISV05Dataset', 'LVISV1Dataset']
from .dataset_wrappers import ClassBalancedDataset  # noqa: E402
from .class_aware_sampler import ClassAwareSampler  # noqa: E402

__all__ += ['ClassBalancedDataset', 'ClassAwareSampler']
from .openimages import OpenImagesChallengeDataset, OpenImagesDataset  # noqa: E402
from .synthetic_openimages import generate_openimages  # noqa: E402

__all__ += ['OpenImagesDataset', 'OpenImagesChallengeDataset', 'generate_openimages']


from .dataset_wrappers import MultiImageMixDataset  # noqa: E402

__all__ += ['MultiImageMixDataset']
from .coco_panoptic import CocoPanopticDataset  # noqa: E402
from .synthetic_coco_panoptic import generate_coco_panoptic  # noqa: E402

__all__ += ['CocoPanopticDataset', 'generate_coco_panoptic']
