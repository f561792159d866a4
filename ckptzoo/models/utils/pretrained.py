"""``init_cfg=dict(type='Pretrained', checkpoint=..., prefix=None)`` for backbones (mmcv's
``PretrainedInit``), resolved offline by :mod:`ckptzoo.runner.checkpoint`."""
from ...runner.checkpoint import load_checkpoint

__all__ = ['check_pretrained_cfg', 'load_pretrained']


def check_pretrained_cfg(init_cfg, owner):
    """``init_cfg`` if it is None or a valid Pretrained dict, else a ValueError naming it."""
    if init_cfg is None:
        return None
    if not isinstance(init_cfg, dict) or init_cfg.get('type') != 'Pretrained' \
            or 'checkpoint' not in init_cfg:
        raise ValueError(f"{owner} init_cfg must be dict(type='Pretrained', checkpoint=PATH), "
                         f'got {init_cfg!r}')
    return init_cfg


def load_pretrained(module, init_cfg, owner):
    """Load the Pretrained ``init_cfg`` into ``module`` (non-strict: heads may be missing)."""
    cfg = check_pretrained_cfg(init_cfg, owner)
    if cfg is not None:
        load_checkpoint(module, cfg['checkpoint'], map_location='cpu', strict=False,
                        prefix=cfg.get('prefix'))
