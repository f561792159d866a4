from .checkpoint import (get_state_dict, load_checkpoint, load_file, resolve_checkpoint_path,
                         save_checkpoint, weights_to_cpu)

__all__ = ['get_state_dict', 'load_checkpoint', 'load_file', 'resolve_checkpoint_path',
           'save_checkpoint', 'weights_to_cpu']
