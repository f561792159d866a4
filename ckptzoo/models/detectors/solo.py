"""mmdet 2.x ``SOLO`` (SOLO: Segmenting Objects by Locations): a
:class:`SingleStageInstanceSegmentor` with a SOLO mask head and no bbox head."""
from ...registry import MODELS
from .single_stage_instance_seg import SingleStageInstanceSegmentor

__all__ = ['SOLO']


@MODELS.register_module()
class SOLO(SingleStageInstanceSegmentor):
    """Args as :class:`SingleStageInstanceSegmentor` (mmdet's)."""
