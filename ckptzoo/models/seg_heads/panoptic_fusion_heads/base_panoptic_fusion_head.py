"""mmdet 2.x ``BasePanopticFusionHead``: turns instance and semantic predictions into one
panoptic map, ``label + instance_id * INSTANCE_OFFSET`` per pixel (stuff: instance id 0; void:
``num_classes``)."""
import torch.nn as nn

from ....registry import MODELS

__all__ = ['BasePanopticFusionHead']


class BasePanopticFusionHead(nn.Module):
    """Args as mmdet 2.x: ``num_things_classes`` (80), ``num_stuff_classes`` (53),
    ``test_cfg`` (the detector's ``test_cfg.panoptic``), ``loss_panoptic`` (a loss config or
    None), ``init_cfg``. mmdet ignores any other keyword argument; here it is refused, named."""

    def __init__(self, num_things_classes=80, num_stuff_classes=53, test_cfg=None,
                 loss_panoptic=None, init_cfg=None, **kwargs):
        super().__init__()
        if kwargs:
            raise TypeError(f'{type(self).__name__} got unexpected arguments {sorted(kwargs)}; '
                            'it takes num_things_classes, num_stuff_classes, test_cfg, '
                            'loss_panoptic, init_cfg')
        for name, value in (('num_things_classes', num_things_classes),
                            ('num_stuff_classes', num_stuff_classes)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f'{type(self).__name__} {name} must be a non-negative int, '
                                 f'got {value!r}')
        self.num_things_classes = num_things_classes
        self.num_stuff_classes = num_stuff_classes
        self.num_classes = num_things_classes + num_stuff_classes
        self.test_cfg = test_cfg
        self.init_cfg = init_cfg
        self.loss_panoptic = MODELS.build(loss_panoptic) if loss_panoptic else None

    @property
    def with_loss(self):
        """Whether the head has a loss (``loss_panoptic``)."""
        return self.loss_panoptic is not None

    def init_weights(self):
        """Nothing to initialise (a fusion head has no weights of its own)."""

    def forward_train(self, gt_masks=None, gt_semantic_seg=None, **kwargs):
        raise NotImplementedError(f'{type(self).__name__} implements no forward_train')

    def simple_test(self, *args, **kwargs):
        raise NotImplementedError(f'{type(self).__name__} implements no simple_test')
