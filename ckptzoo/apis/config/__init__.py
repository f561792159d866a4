"""The config as a training run reads it: :func:`load_config` (a file, its ``_base_`` files and
``--cfg-options``; errors name the file and line) and :func:`check_config` (every key against
the schema, and the values that would otherwise fail late), before anything is built.

mmengine's ``Config`` takes any key, so a typo (``--cfg-options runer.max_epochs=1``,
``data.samples_per_gpus=2``) used to add a key that nothing read, and the run trained on the
defaults. The schema is what ckptzoo reads: :data:`KNOWN_KEYS` at the top level; fixed sub-keys
for ``data``, ``log_config``, ``auto_scale_lr``, ...; and, for a dict built into a registered
class (``type=...``), that class's ``__init__`` signature
(:func:`ckptzoo.registry.accepted_args`). Hooks that take ``**kwargs`` for somewhere else check
them themselves (CheckpointHook: ``save_checkpoint``'s; EvalHook: ``dataset.evaluate``'s).

The top level of an mmdet 2.x config file is also a namespace of variables (``img_norm_cfg``,
``train_pipeline``, ``dataset_type``, ``data_root``, ``classes``, ...): an unknown top-level key
*in the file* is accepted (a warning naming the file that sets it when it is one edit away from
a known key, ``runer``, ``evalution``: :func:`near_miss`).
A top-level key given by ``--cfg-options`` is different: the file has been run, its variables
already used, so an override only has an effect where ckptzoo reads it. Any ``--cfg-options``
key whose top level is not a known key fails: a new one is a typo (with the close matches),
one that names a variable of the file changes nothing (the message says so).

The package, one concept per module: :mod:`.schema` (the keys, :class:`ConfigError`),
:mod:`.loading` (:func:`load_config`), :mod:`.checking` (:func:`check_config`),
:mod:`.near_miss` (the warning for a misspelt top-level key).
"""
from .checking import DEFAULT_MEMORY_CHECK_INTERVAL, check_config, memory_check_interval
from .loading import load_config
from .near_miss import near_miss
from .schema import KNOWN_KEYS, ConfigError

__all__ = ['ConfigError', 'KNOWN_KEYS', 'load_config', 'check_config',
           'memory_check_interval', 'DEFAULT_MEMORY_CHECK_INTERVAL', 'near_miss']
