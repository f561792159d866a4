"""The detection machinery below the models, where mmdet 2.x keeps it in ``mmdet/core``:
anchors (``anchor/``), boxes (``bbox/``: assigners, samplers, coders, IoU, transforms), instance
masks (``mask/``), post-processing (``post_processing/``: NMS over classes, test-time
augmentation merges) and small helpers (``utils/``).

A library below ``ckptzoo.models``: the models, the data pipeline, the test loop and the memory
planner import it; it imports none of them (only ``ckptzoo.ops``, ``ckptzoo.utils`` and the
registries). Importing it registers its types (``AnchorGenerator``, ``MaxIoUAssigner``, ...).
"""
from .anchor import *  # noqa: F401,F403
from .bbox import *  # noqa: F401,F403
from .mask import *  # noqa: F401,F403
from .post_processing import *  # noqa: F401,F403
from .utils import *  # noqa: F401,F403
