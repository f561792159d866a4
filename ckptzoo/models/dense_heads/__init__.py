"""Dense (single-stage and RPN) heads, mmdet 2.x ``dense_heads``; ``level_units`` makes each
pyramid level of a head a checkpoint unit (ours: mmdet has no such module)."""
from .anchor_free_head import AnchorFreeHead
from .anchor_head import AnchorHead
from .atss_head import ATSSHead
from .base_dense_head import BaseDenseHead
from .gfl_head import GFLHead
from .ddod_head import DDODHead
from .cascade_rpn_head import CascadeRPNHead, StageCascadeRPNHead
from .retina_head import RetinaHead
from .rpn_head import RPNHead
from .tood_head import TOODHead

__all__ = [
    'AnchorFreeHead',
    'AnchorHead',
    'ATSSHead',
    'BaseDenseHead',
    'CascadeRPNHead',
    'DDODHead',
    'GFLHead',
    'StageCascadeRPNHead',
    'RetinaHead',
    'RPNHead',
    'TOODHead',
]

from .reppoints_head import RepPointsHead  # noqa: E402

__all__ += ['RepPointsHead']

from .paa_head import PAAHead  # noqa: E402

__all__ += ['PAAHead']

from .fcos_head import FCOSHead  # noqa: E402

__all__ += ['FCOSHead']

from .retina_sepbn_head import RetinaSepBNHead  # noqa: E402
__all__ += ['RetinaSepBNHead']
from .free_anchor_retina_head import FreeAnchorRetinaHead  # noqa: E402
__all__ += ['FreeAnchorRetinaHead']
from .pisa_retinanet_head import PISARetinaHead  # noqa: E402
__all__ += ['PISARetinaHead']
from .fsaf_head import FSAFHead  # noqa: E402
__all__ += ['FSAFHead']

# SSD's and YOLOv3's heads (kept apart: the lines above are shared edits)
from .ssd_head import SSDHead  # noqa: E402

__all__ += ['SSDHead']
from .yolo_head import YOLOV3Head  # noqa: E402

__all__ += ['YOLOV3Head']

from .yolof_head import YOLOFHead  # noqa: E402
__all__ += ['YOLOFHead']

from .guided_anchor_head import FeatureAdaption, GuidedAnchorHead  # noqa: E402
from .ga_retina_head import GARetinaHead  # noqa: E402
from .ga_rpn_head import GARPNHead  # noqa: E402

__all__ += ['FeatureAdaption', 'GuidedAnchorHead', 'GARetinaHead', 'GARPNHead']

from .sabl_retina_head import SABLRetinaHead  # noqa: E402

__all__ += ['SABLRetinaHead']

from .ascend_ssd_head import AscendSSDHead  # noqa: E402

__all__ += ['AscendSSDHead']
from .pisa_ssd_head import PISASSDHead  # noqa: E402

__all__ += ['PISASSDHead']

from .nasfcos_head import NASFCOSHead  # noqa: E402

__all__ += ['NASFCOSHead']

from .autoassign_head import AutoAssignHead, CenterPrior  # noqa: E402

__all__ += ['AutoAssignHead', 'CenterPrior']

from .fovea_head import FeatureAlign, FoveaHead  # noqa: E402

__all__ += ['FeatureAlign', 'FoveaHead']

from .centernet_head import CenterNetHead  # noqa: E402

__all__ += ['CenterNetHead']

from .vfnet_head import VFNetHead  # noqa: E402

__all__ += ['VFNetHead']

from .lad_head import LADHead  # noqa: E402

__all__ += ['LADHead']

from .yolox_head import YOLOXHead  # noqa: E402

__all__ += ['YOLOXHead']
from .corner_head import CornerHead  # noqa: E402

__all__ += ['CornerHead']
from .centripetal_head import CentripetalHead  # noqa: E402

__all__ += ['CentripetalHead']
from .ld_head import LDHead  # noqa: E402

__all__ += ['LDHead']
from .ascend_retina_head import AscendAnchorHead, AscendRetinaHead  # noqa: E402

__all__ += ['AscendAnchorHead', 'AscendRetinaHead']
from .embedding_rpn_head import EmbeddingRPNHead  # noqa: E402

__all__ += ['EmbeddingRPNHead']
from .yolact_head import YOLACTHead, YOLACTProtonet, YOLACTSegmHead  # noqa: E402

__all__ += ['YOLACTHead', 'YOLACTProtonet', 'YOLACTSegmHead']
from .base_mask_head import BaseMaskHead  # noqa: E402
from .solo_head import SOLOHead  # noqa: E402
from .decoupled_solo_head import DecoupledSOLOHead, DecoupledSOLOLightHead  # noqa: E402
from .solov2_head import MaskFeatModule, SOLOV2Head  # noqa: E402

__all__ += ['BaseMaskHead']
__all__ += ['SOLOHead']
__all__ += ['DecoupledSOLOHead']
__all__ += ['DecoupledSOLOLightHead']
__all__ += ['MaskFeatModule']
__all__ += ['SOLOV2Head']

from .maskformer_head import MaskFormerHead  # noqa: E402
from .mask2former_head import Mask2FormerHead  # noqa: E402

__all__ += ['MaskFormerHead', 'Mask2FormerHead']

from .detr_head import DETRHead  # noqa: E402
from .deformable_detr_head import DeformableDETRHead  # noqa: E402

__all__ += ['DETRHead', 'DeformableDETRHead']
