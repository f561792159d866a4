from .base_runner import BaseRunner
from .checkpoint import (find_latest_checkpoint, get_state_dict, load_checkpoint, load_file,
                         resolve_checkpoint_path, save_checkpoint, weights_to_cpu)
from .dist_utils import get_dist_info, init_dist
from .epoch_based_runner import EpochBasedRunner
from .fp16 import auto_fp16, force_fp32, wrap_fp16_model
from .hooks import *  # noqa: F401,F403
from .iter_based_runner import IterBasedRunner
from .iter_loader import IterLoader
from .log_buffer import LogBuffer
from . import optimizer_constructor  # noqa: F401  (registers DefaultOptimizerConstructor)
from . import layer_decay_optimizer_constructor  # noqa: F401,E402  (registers it)
from .parallel import MMDistributedDataParallel
from .preemption import TrainingPreempted
from .priority import Priority, get_priority

__all__ = ['BaseRunner', 'EpochBasedRunner', 'IterBasedRunner', 'IterLoader', 'LogBuffer',
           'Priority', 'get_priority', 'get_state_dict', 'load_checkpoint', 'load_file',
           'resolve_checkpoint_path', 'save_checkpoint', 'weights_to_cpu', 'get_dist_info',
           'init_dist', 'auto_fp16', 'force_fp32', 'wrap_fp16_model',
           'MMDistributedDataParallel', 'TrainingPreempted', 'find_latest_checkpoint']
