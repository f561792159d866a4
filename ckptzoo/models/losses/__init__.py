from .accuracy import Accuracy, accuracy
from .balanced_l1_loss import BalancedL1Loss, balanced_l1_loss
from .cross_entropy_loss import CrossEntropyLoss, mask_cross_entropy
from .focal_loss import FocalLoss, sigmoid_focal_loss
from .iou_loss import (BoundedIoULoss, CIoULoss, DIoULoss, GIoULoss, IoULoss, bounded_iou_loss,
                       ciou_loss, diou_loss, giou_loss, iou_loss)
from .l1_loss import L1Loss, SmoothL1Loss, l1_loss, smooth_l1_loss
from .mse_loss import MSELoss, mse_loss
from .pisa_loss import carl_loss, isr_p
from .seesaw_loss import SeesawLoss
from .utils import reduce_loss, weight_reduce_loss, weighted_loss

__all__ = ['Accuracy', 'accuracy', 'CrossEntropyLoss', 'mask_cross_entropy', 'FocalLoss',
           'sigmoid_focal_loss', 'GIoULoss', 'L1Loss', 'SmoothL1Loss', 'l1_loss',
           'smooth_l1_loss', 'MSELoss', 'mse_loss', 'isr_p', 'carl_loss', 'reduce_loss',
           'weight_reduce_loss', 'weighted_loss', 'IoULoss', 'BoundedIoULoss', 'DIoULoss',
           'CIoULoss', 'iou_loss', 'bounded_iou_loss', 'giou_loss', 'diou_loss', 'ciou_loss',
           'BalancedL1Loss', 'balanced_l1_loss', 'SeesawLoss']

from .gfocal_loss import (DistributionFocalLoss, QualityFocalLoss,  # noqa: E402
                          distribution_focal_loss, quality_focal_loss,
                          quality_focal_loss_with_prob)

__all__ += ['QualityFocalLoss', 'DistributionFocalLoss', 'quality_focal_loss',
            'quality_focal_loss_with_prob', 'distribution_focal_loss']

from .ghm_loss import GHMC, GHMR  # noqa: E402
__all__ += ['GHMC', 'GHMR']

from .gaussian_focal_loss import GaussianFocalLoss, gaussian_focal_loss  # noqa: E402

__all__ += ['GaussianFocalLoss', 'gaussian_focal_loss']

from .varifocal_loss import VarifocalLoss, varifocal_loss  # noqa: E402

__all__ += ['VarifocalLoss', 'varifocal_loss']

from .kd_loss import (KnowledgeDistillationKLDivLoss,  # noqa: E402
                      knowledge_distillation_kl_div_loss)

__all__ += ['KnowledgeDistillationKLDivLoss', 'knowledge_distillation_kl_div_loss']
from .ae_loss import AssociativeEmbeddingLoss  # noqa: E402

__all__ += ['AssociativeEmbeddingLoss']
from .dice_loss import DiceLoss, dice_loss  # noqa: E402

__all__ += ['DiceLoss', 'dice_loss']
