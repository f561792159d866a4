"""mmdet 2.x ``PanopticFPN`` (Kirillov et al. 2019): Mask R-CNN plus a ``PanopticFPNHead``
semantic branch and a ``HeuristicFusionHead``; see :class:`TwoStagePanopticSegmentor`."""
from ...registry import MODELS
from .panoptic_two_stage_segmentor import TwoStagePanopticSegmentor

__all__ = ['PanopticFPN']


@MODELS.register_module()
class PanopticFPN(TwoStagePanopticSegmentor):
    """Args as mmdet 2.x :class:`TwoStagePanopticSegmentor`."""
