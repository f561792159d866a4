from .classification import (BaseClassificationDataset, CustomDataset,  # noqa: F401
                             SyntheticClassificationDataset)
