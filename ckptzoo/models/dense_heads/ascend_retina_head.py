"""mmdet 2.x ``AscendAnchorHead`` / ``AscendRetinaHead``: mmdet's batched forms of
:class:`AnchorHead`'s targets for Ascend NPUs (all images assigned at once). Their losses
equal ``AnchorHead``'s / ``RetinaHead``'s (checked against mmdet 2.28.2's on the same weights
and inputs), so here they are those heads under their registry names, with mmdet's one extra
rule: ``reg_decoded_bbox`` must be False."""
from ...registry import MODELS
from .anchor_head import AnchorHead
from .retina_head import RetinaHead

__all__ = ['AscendAnchorHead', 'AscendRetinaHead']


def _check(owner, reg_decoded_bbox):
    if reg_decoded_bbox:
        raise ValueError(f'{owner} supports reg_decoded_bbox=False only (as mmdet), got '
                         f'{reg_decoded_bbox!r}')


@MODELS.register_module()
class AscendAnchorHead(AnchorHead):
    """Args as :class:`AnchorHead` (mmdet's)."""

    def __init__(self, *args, reg_decoded_bbox=False, **kwargs):
        _check(type(self).__name__, reg_decoded_bbox)
        super().__init__(*args, reg_decoded_bbox=reg_decoded_bbox, **kwargs)


@MODELS.register_module()
class AscendRetinaHead(RetinaHead):
    """Args as :class:`RetinaHead` (mmdet's)."""

    def __init__(self, *args, reg_decoded_bbox=False, **kwargs):
        _check(type(self).__name__, reg_decoded_bbox)
        super().__init__(*args, reg_decoded_bbox=reg_decoded_bbox, **kwargs)
