from .backbones import *  # noqa: F401,F403
from .checkpointing import (CheckpointOwnerMixin, CheckpointUnit, checkpoint,  # noqa: F401
                            checkpoint_sequential, should_checkpoint)
from .classifiers import *  # noqa: F401,F403
from .losses import *  # noqa: F401,F403
from .necks import *  # noqa: F401,F403
from .heads import *  # noqa: F401,F403
from .dense_heads import *  # noqa: F401,F403
from .roi_heads import *  # noqa: F401,F403
from .detectors import *  # noqa: F401,F403
from .seg_heads import *  # noqa: F401,F403
from .plugins import *  # noqa: F401,F403
