from .base import BaseDetector
from .cascade_rcnn import CascadeRCNN
from .fast_rcnn import FastRCNN
from .faster_rcnn import FasterRCNN
from .grid_rcnn import GridRCNN
from .htc import HybridTaskCascade
from .mask_rcnn import MaskRCNN
from .mask_scoring_rcnn import MaskScoringRCNN
from .point_rend import PointRend
from .retinanet import RetinaNet
from .rpn import RPN
from .single_stage import SingleStageDetector, bbox2result
from .trident_faster_rcnn import TridentFasterRCNN
from .two_stage import TwoStageDetector

__all__ = ['BaseDetector', 'CascadeRCNN', 'FastRCNN', 'FasterRCNN', 'GridRCNN',
           'HybridTaskCascade', 'MaskRCNN', 'MaskScoringRCNN', 'PointRend', 'RetinaNet', 'RPN',
           'SingleStageDetector', 'TridentFasterRCNN', 'TwoStageDetector', 'bbox2result']

from .scnet import SCNet  # noqa: E402

__all__ += ['SCNet']

from .fcos import FCOS  # noqa: E402

__all__ += ['FCOS']

from .reppoints_detector import RepPointsDetector  # noqa: E402

__all__ += ['RepPointsDetector']

from .atss import ATSS  # noqa: E402

__all__ += ['ATSS']

from .gfl import GFL  # noqa: E402

__all__ += ['GFL']

from .paa import PAA  # noqa: E402

__all__ += ['PAA']

from .fcos import FCOS  # noqa: E402

from .fsaf import FSAF  # noqa: E402
__all__ += ['FSAF']

from .yolo import YOLOV3  # noqa: E402

__all__ += ['YOLOV3']

from .yolof import YOLOF  # noqa: E402
__all__ += ['YOLOF']

from .tood import TOOD  # noqa: E402

__all__ += ['TOOD']

from .ddod import DDOD  # noqa: E402

__all__ += ['DDOD']

from .nasfcos import NASFCOS  # noqa: E402

__all__ += ['NASFCOS']

from .autoassign import AutoAssign  # noqa: E402

__all__ += ['AutoAssign']

from .fovea import FOVEA  # noqa: E402

__all__ += ['FOVEA']

from .centernet import CenterNet  # noqa: E402

__all__ += ['CenterNet']

from .vfnet import VFNet  # noqa: E402

__all__ += ['VFNet']

from .lad import LAD  # noqa: E402

__all__ += ['LAD']

from .yolox import YOLOX  # noqa: E402

__all__ += ['YOLOX']
from .cornernet import CornerNet  # noqa: E402

__all__ += ['CornerNet']
from .kd_one_stage import KnowledgeDistillationSingleStageDetector  # noqa: E402

__all__ += ['KnowledgeDistillationSingleStageDetector']
from .panoptic_two_stage_segmentor import (BasePanopticSegmentor,  # noqa: E402
                                           TwoStagePanopticSegmentor)

__all__ += ['BasePanopticSegmentor']
__all__ += ['TwoStagePanopticSegmentor']
from .panoptic_fpn import PanopticFPN  # noqa: E402

__all__ += ['PanopticFPN']
from .single_stage_instance_seg import SingleStageInstanceSegmentor  # noqa: E402

__all__ += ['SingleStageInstanceSegmentor']
from .sparse_rcnn import SparseRCNN  # noqa: E402
from .queryinst import QueryInst  # noqa: E402

__all__ += ['SparseRCNN', 'QueryInst']
from .yolact import YOLACT  # noqa: E402

__all__ += ['YOLACT']
from .solo import SOLO  # noqa: E402

__all__ += ['SOLO']
from .solov2 import SOLOv2  # noqa: E402

__all__ += ['SOLOv2']

from .maskformer import MaskFormer  # noqa: E402
from .mask2former import Mask2Former  # noqa: E402

__all__ += ['MaskFormer', 'Mask2Former']

from .detr import DETR, DeformableDETR  # noqa: E402

__all__ += ['DETR', 'DeformableDETR']
