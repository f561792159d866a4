"""The schema of a config: the keys ckptzoo reads (:data:`KNOWN_KEYS` at the top level, the fixed
sub-keys of ``data``, ``log_config`` and ``auto_scale_lr``), and :class:`ConfigError`."""

__all__ = ['ConfigError', 'KNOWN_KEYS', 'DATA_KEYS', 'LOG_CONFIG_KEYS', 'AUTO_SCALE_LR_KEYS']


class ConfigError(ValueError):
    """A config that cannot train: the message names the file or the key."""


#: top-level keys ckptzoo (or mmengine, ``custom_imports``) reads; their sub-keys are checked
#: in :mod:`.checking`
KNOWN_KEYS = frozenset((
    'model', 'train_cfg', 'test_cfg', 'data', 'optimizer', 'optimizer_config', 'fp16',
    'lr_config', 'momentum_config', 'runner', 'total_epochs', 'workflow', 'checkpoint_config',
    'log_config', 'custom_hooks', 'evaluation', 'auto_scale_lr', 'work_dir', 'load_from',
    'resume_from', 'auto_resume', 'seed', 'device', 'dist_params', 'log_level',
    'find_unused_parameters', 'cudnn_benchmark', 'opencv_num_threads', 'mp_start_method',
    'custom_imports', 'checkpoint_plan', 'checkpoint_segments', 'memory_budget',
    'memory_check_interval', 'synthetic_data'))

DATA_KEYS = ('samples_per_gpu', 'workers_per_gpu', 'persistent_workers', 'train', 'val', 'test',
             'train_dataloader', 'val_dataloader', 'test_dataloader')
LOG_CONFIG_KEYS = ('interval', 'hooks')
AUTO_SCALE_LR_KEYS = ('enable', 'base_batch_size')
