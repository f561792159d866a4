from .classification import (BaseClassificationDataset, ImageFolderDataset,  # noqa: F401
                             SyntheticClassificationDataset)
