"""mmdet 2.x ``HybridTaskCascade`` (HTC, Chen et al. 2019): a :class:`CascadeRCNN` whose RoI
head is a :class:`~ckptzoo.models.roi_heads.HybridTaskCascadeRoIHead` (state-dict keys as
mmdet: ``roi_head.semantic_head.*`` besides the cascade's)."""
from ...registry import MODELS
from .cascade_rcnn import CascadeRCNN

__all__ = ['HybridTaskCascade']


@MODELS.register_module()
class HybridTaskCascade(CascadeRCNN):
    """Args as mmdet 2.x (keyword arguments, those of :class:`CascadeRCNN`)."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)

    @property
    def with_semantic(self):
        """Whether the RoI head has a semantic branch."""
        return self.roi_head.with_semantic
