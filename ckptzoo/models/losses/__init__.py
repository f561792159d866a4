from .accuracy import Accuracy, accuracy
from .cross_entropy_loss import CrossEntropyLoss
from .focal_loss import FocalLoss, sigmoid_focal_loss
from .giou_loss import GIoULoss
from .l1_loss import L1Loss, SmoothL1Loss, l1_loss, smooth_l1_loss
from .utils import reduce_loss, weight_reduce_loss, weighted_loss

__all__ = ['Accuracy', 'accuracy', 'CrossEntropyLoss', 'FocalLoss', 'sigmoid_focal_loss',
           'GIoULoss', 'L1Loss', 'SmoothL1Loss', 'l1_loss', 'smooth_l1_loss', 'reduce_loss',
           'weight_reduce_loss', 'weighted_loss']
