from .backbones import *  # noqa: F401,F403
from .checkpoint import checkpoint, checkpoint_sequential, should_checkpoint  # noqa: F401
from .classifiers import *  # noqa: F401,F403
