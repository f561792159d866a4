"""mmdet 2.x ``AscendSSDHead``: mmdet's batched form of :class:`SSDHead`'s loss for Ascend NPUs
(hard negative mining over the whole batch at once). Its losses equal ``SSDHead``'s (checked
against mmdet 2.28.2's on the same weights and inputs), so here it is ``SSDHead`` under its
registry name, with its one extra rule: ``reg_decoded_bbox`` must be False."""
from ...registry import MODELS
from .ssd_head import SSDHead

__all__ = ['AscendSSDHead']


@MODELS.register_module()
class AscendSSDHead(SSDHead):
    """Args as :class:`SSDHead` (mmdet's)."""

    def __init__(self, *args, reg_decoded_bbox=False, **kwargs):
        if reg_decoded_bbox:
            raise ValueError('AscendSSDHead supports reg_decoded_bbox=False only (as mmdet), '
                             f'got {reg_decoded_bbox!r}')
        super().__init__(*args, reg_decoded_bbox=reg_decoded_bbox, **kwargs)
