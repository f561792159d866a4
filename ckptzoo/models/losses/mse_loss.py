"""mmdet 2.x ``MSELoss`` (Mask Scoring R-CNN's ``loss_iou``)."""
import torch.nn.functional as F

from ...registry import MODELS
from .l1_loss import _check_shapes, _RegressionLoss
from .utils import weighted_loss

__all__ = ['MSELoss', 'mse_loss']


@weighted_loss
def mse_loss(pred, target):
    _check_shapes(pred, target)
    return F.mse_loss(pred, target, reduction='none')


@MODELS.register_module()
class MSELoss(_RegressionLoss):
    """``(pred - target) ** 2``; args ``reduction``, ``loss_weight`` (mmdet's)."""

    def _loss(self, pred, target, **kwargs):
        return mse_loss(pred, target, **kwargs)
