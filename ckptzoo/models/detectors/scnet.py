"""mmdet 2.x ``SCNet`` (Vu et al. 2021): a :class:`CascadeRCNN` whose RoI head is an
:class:`~ckptzoo.models.roi_heads.SCNetRoIHead` (state-dict keys as mmdet's)."""
from ...registry import MODELS
from .cascade_rcnn import CascadeRCNN

__all__ = ['SCNet']


@MODELS.register_module()
class SCNet(CascadeRCNN):
    """Args as mmdet 2.x (keyword arguments, those of :class:`CascadeRCNN`)."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
