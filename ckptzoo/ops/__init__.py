"""The ops mmdet 2.x takes from ``mmcv.ops``, on torchvision and plain PyTorch (no compiled
mmcv): ``DeformConv2d`` / ``DeformConv2dPack`` (DCN) / ``ModulatedDeformConv2dPack`` (DCNv2),
``nms`` / ``batched_nms``, ``RoIAlign``, PointRend's ``point_sample`` and ``SimpleRoIAlign``,
``carafe`` / ``CARAFEPack``, deformable RoI pooling (``DeformRoIPoolPack``,
``ModulatedDeformRoIPoolPack``). The lowest layer of the model code: it imports
nothing of ckptzoo."""
from .deform_conv import (DeformConv2d, DeformConv2dPack, ModulatedDeformConv2d,
                          ModulatedDeformConv2dPack, upgrade_offset_keys)
from .nms import batched_nms, nms, nms_match
from .point_sample import (SimpleRoIAlign, point_sample, rel_roi_point_to_abs_img_point,
                           rel_roi_point_to_rel_img_point)
from .roi_align import RoIAlign
from .carafe import CARAFEPack, carafe
from .deform_roi_pool import (DeformRoIPool, DeformRoIPoolPack, ModulatedDeformRoIPoolPack,
                              deform_roi_pool)

__all__ = ['DeformConv2d', 'DeformConv2dPack', 'ModulatedDeformConv2d',
           'ModulatedDeformConv2dPack', 'upgrade_offset_keys', 'batched_nms', 'nms', 'nms_match',
           'RoIAlign', 'SimpleRoIAlign', 'point_sample', 'rel_roi_point_to_abs_img_point',
           'rel_roi_point_to_rel_img_point', 'CARAFEPack', 'carafe', 'deform_roi_pool',
           'DeformRoIPool', 'DeformRoIPoolPack', 'ModulatedDeformRoIPoolPack']

from .masked_conv import MaskedConv2d  # noqa: E402

__all__ += ['MaskedConv2d']
from .nms import soft_nms  # noqa: E402
from .corner_pool import CornerPool  # noqa: E402

__all__ += ['soft_nms', 'CornerPool']
from .multi_scale_deform_attn import (MultiScaleDeformableAttention,  # noqa: E402
                                      multi_scale_deformable_attn_pytorch)

__all__ += ['MultiScaleDeformableAttention', 'multi_scale_deformable_attn_pytorch']
from .conv_rfsearch import BaseConvRFSearchOp, Conv2dRFSearchOp  # noqa: E402

__all__ += ['BaseConvRFSearchOp', 'Conv2dRFSearchOp']
