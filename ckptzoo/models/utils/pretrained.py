"""``init_cfg=dict(type='Pretrained', checkpoint=..., prefix=None)`` for backbones (mmcv's
``PretrainedInit``), resolved offline by :mod:`ckptzoo.runner.checkpoint`."""
from ...runner.checkpoint import load_checkpoint
import warnings

__all__ = ['check_pretrained_cfg', 'load_pretrained', 'pretrained_to_init_cfg']


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


def pretrained_to_init_cfg(pretrained, init_cfg):
    """mmdet 2.x's deprecated ``pretrained=PATH`` as ``init_cfg``; giving both is an error."""
    if pretrained is None:
        return init_cfg
    if init_cfg is not None:
        raise ValueError('give pretrained or init_cfg, not both')
    warnings.warn('pretrained is deprecated, use init_cfg=dict(type="Pretrained", '
                  'checkpoint=...)', DeprecationWarning)
    return dict(type='Pretrained', checkpoint=pretrained)
