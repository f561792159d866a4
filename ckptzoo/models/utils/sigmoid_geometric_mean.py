"""mmdet 2.x ``sigmoid_geometric_mean``: ``sqrt(sigmoid(x) * sigmoid(y))`` (TOOD's joint class
score) with its analytic gradient, which stays finite where autograd's of the composed ops
gives NaN (both sigmoids underflowing to 0)."""
import torch

__all__ = ['sigmoid_geometric_mean', 'SigmoidGeometricMean']


class SigmoidGeometricMean(torch.autograd.Function):
    """``z = sqrt(s(x) s(y))``; ``dz/dx = z (1 - s(x)) / 2``, ``dz/dy = z (1 - s(y)) / 2``."""

    @staticmethod
    def forward(ctx, x, y):
        sx, sy = x.sigmoid(), y.sigmoid()
        z = (sx * sy).sqrt()
        ctx.save_for_backward(sx, sy, z)
        return z

    @staticmethod
    def backward(ctx, grad_output):
        sx, sy, z = ctx.saved_tensors
        return grad_output * z * (1 - sx) / 2, grad_output * z * (1 - sy) / 2


sigmoid_geometric_mean = SigmoidGeometricMean.apply
