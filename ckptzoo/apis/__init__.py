from .train import find_latest_checkpoint, select_optimizer_hook, set_random_seed, train_model

__all__ = ['find_latest_checkpoint', 'select_optimizer_hook', 'set_random_seed', 'train_model']
