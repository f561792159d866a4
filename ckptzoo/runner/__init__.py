from .checkpoint import (get_state_dict, load_checkpoint, load_file, resolve_checkpoint_path,
                         save_checkpoint, weights_to_cpu)

__all__ = ['get_state_dict', 'load_checkpoint', 'load_file', 'resolve_checkpoint_path',
           'save_checkpoint', 'weights_to_cpu']
from .fp16 import auto_fp16, force_fp32, wrap_fp16_model  # noqa: E402
from .hooks import *  # noqa: E402,F401,F403
from .log_buffer import LogBuffer  # noqa: E402
from .priority import Priority, get_priority  # noqa: E402

__all__ += ['auto_fp16', 'force_fp32', 'wrap_fp16_model', 'LogBuffer', 'Priority', 'get_priority',
            'Hook']
