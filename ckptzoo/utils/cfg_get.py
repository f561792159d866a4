"""A key of a head's ``train_cfg`` / ``test_cfg``, which may be None, a dict or an mmengine
ConfigDict (attribute access)."""
from collections.abc import Mapping

__all__ = ['cfg_get']


def cfg_get(cfg, key, default=None):
    """``cfg[key]``, ``default`` when ``cfg`` is None or lacks the key."""
    if cfg is None:
        return default
    return cfg.get(key, default) if isinstance(cfg, Mapping) else getattr(cfg, key, default)
