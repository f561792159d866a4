"""mmdet 2.x ``SOLOv2`` (SOLOv2: Dynamic and Fast Instance Segmentation): a
:class:`SingleStageInstanceSegmentor` with a SOLOv2 mask head and no bbox head."""
from ...registry import MODELS
from .single_stage_instance_seg import SingleStageInstanceSegmentor

__all__ = ['SOLOv2']


@MODELS.register_module()
class SOLOv2(SingleStageInstanceSegmentor):
    """Args as :class:`SingleStageInstanceSegmentor` (mmdet's)."""
