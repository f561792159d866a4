from .accuracy import Accuracy, accuracy
from .cross_entropy_loss import CrossEntropyLoss, mask_cross_entropy
from .focal_loss import FocalLoss, sigmoid_focal_loss
from .giou_loss import GIoULoss
from .l1_loss import L1Loss, SmoothL1Loss, l1_loss, smooth_l1_loss
from .mse_loss import MSELoss, mse_loss
from .pisa_loss import carl_loss, isr_p
from .utils import reduce_loss, weight_reduce_loss, weighted_loss

__all__ = ['Accuracy', 'accuracy', 'CrossEntropyLoss', 'mask_cross_entropy', 'FocalLoss',
           'sigmoid_focal_loss', 'GIoULoss', 'L1Loss', 'SmoothL1Loss', 'l1_loss',
           'smooth_l1_loss', 'MSELoss', 'mse_loss', 'isr_p', 'carl_loss', 'reduce_loss',
           'weight_reduce_loss', 'weighted_loss']
