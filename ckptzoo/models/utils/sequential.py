"""mmcv 1.x ``Sequential``: what mmdet builds for a model part given as a list of configs
(Libra R-CNN's ``neck=[dict(type='FPN', ...), dict(type='BFP', ...)]``), keys ``0.*``, ``1.*``.

The checkpoint units of its members are found under ``neck.0.``, ``neck.1.``, ... ."""
import torch.nn as nn

__all__ = ['Sequential', 'build_model_or_sequence']


class Sequential(nn.Sequential):
    """``nn.Sequential`` whose ``init_weights`` lets each member load its ``init_cfg``."""

    def init_weights(self):
        for m in self:
            if hasattr(m, 'init_weights'):
                m.init_weights()


def build_model_or_sequence(cfg, registry):
    """``registry.build(cfg)``, or for a list of configs a :class:`Sequential` of them, as
    mmcv's ``build_model_from_cfg``."""
    if isinstance(cfg, (list, tuple)):
        if not cfg:
            raise ValueError('a model part given as a list needs at least one config')
        return Sequential(*[registry.build(c) for c in cfg])
    return registry.build(cfg)
