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

from .dataset_wrappers import MultiImageMixDataset  # noqa: E402

__all__ += ['MultiImageMixDataset']
