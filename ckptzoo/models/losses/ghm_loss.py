"""mmdet 2.x GHM losses (Li et al. 2019, Gradient Harmonized Single-stage Detector): ``GHMC``
(sigmoid cross-entropy) and ``GHMR`` (authentic smooth L1), each element weighted by the
inverse density of its gradient norm over ``bins`` unit regions, optionally a moving average
(``momentum``) kept in the buffer ``acc_sum``. Buffers ``edges`` (and ``acc_sum`` with momentum)
are in the state dict as mmdet's.

Both average over their own count (valid elements for GHMC, the label-weight sum for GHMR),
not the ``avg_factor`` a head passes, as mmdet."""
import torch
import torch.nn as nn
import torch.nn.functional as F

from ...registry import MODELS
from .utils import check_reduction, weight_reduce_loss

__all__ = ['GHMC', 'GHMR']


class _GHMBase(nn.Module):

    def _init_bins(self, bins, momentum, last_edge):
        if not (isinstance(bins, int) and bins > 0):
            raise ValueError(f'{type(self).__name__} bins must be a positive int, got {bins!r}')
        if not 0 <= momentum < 1:
            raise ValueError(f'{type(self).__name__} momentum must be in [0, 1), got '
                             f'{momentum!r}')
        self.bins = bins
        self.momentum = momentum
        edges = torch.arange(bins + 1).float() / bins
        edges[-1] = last_edge(edges[-1])
        self.register_buffer('edges', edges)
        if momentum > 0:
            self.register_buffer('acc_sum', torch.zeros(bins))

    def _weights(self, g, valid, tot, dtype):
        """Per element ``tot / (count of its bin)`` (or of the moving average), divided by the
        number of non-empty bins; zero where invalid. One host sync for the counts instead
        of one per bin."""
        bin_idx = torch.bucketize(g, self.edges.to(g.dtype), right=True) - 1
        in_range = valid & (bin_idx >= 0) & (bin_idx < self.bins)
        bin_idx = torch.where(in_range, bin_idx, torch.full_like(bin_idx, self.bins))
        counts = torch.bincount(bin_idx.reshape(-1), minlength=self.bins + 1)[:self.bins]
        table = [0.0] * (self.bins + 1)
        n = 0
        for i, num in enumerate(counts.tolist()):
            if num > 0:
                if self.momentum > 0:
                    self.acc_sum[i] = self.momentum * self.acc_sum[i] \
                        + (1 - self.momentum) * num
                    table[i] = tot / self.acc_sum[i]
                else:
                    table[i] = tot / num
                n += 1
        table = torch.stack([torch.as_tensor(t, dtype=dtype, device=g.device)
                             for t in table])
        weights = table[bin_idx]
        return weights / n if n > 0 else weights

    def _reduction(self, reduction_override):
        return check_reduction(reduction_override) if reduction_override else self.reduction


@MODELS.register_module()
class GHMC(_GHMBase):
    """GHM classification loss.

    Args:
        bins (int): unit regions of the gradient norm.
        momentum (float): of the moving average of the bin counts (0: none).
        use_sigmoid (bool): only True (binary cross-entropy), as mmdet.
        loss_weight (float), reduction (str): as mmdet.
    """

    def __init__(self, bins=10, momentum=0, use_sigmoid=True, loss_weight=1.0,
                 reduction='mean'):
        super().__init__()
        self._init_bins(bins, momentum, lambda last: last + 1e-6)
        if not use_sigmoid:
            raise NotImplementedError('GHMC supports use_sigmoid=True only (as mmdet)')
        self.use_sigmoid = use_sigmoid
        self.loss_weight = loss_weight
        self.reduction = check_reduction(reduction)

    def forward(self, pred, target, label_weight, reduction_override=None, **kwargs):
        """``pred [N, C]`` logits; ``target [N]`` class indices (``C`` = background) or
        ``[N, C]`` binary; ``label_weight`` ``[N]`` or ``[N, C]`` (> 0: valid).
        ``avg_factor`` and other keyword arguments are ignored, as mmdet."""
        reduction = self._reduction(reduction_override)
        if pred.dim() != target.dim():
            channels = pred.size(-1)
            inside = (target >= 0) & (target < channels)
            target = F.one_hot(torch.where(inside, target, torch.full_like(target, channels))
                               .long(), channels + 1)[:, :channels]
            label_weight = label_weight.view(-1, 1).expand(label_weight.size(0), channels)
        target = target.to(pred.dtype)
        label_weight = label_weight.float()
        g = torch.abs(pred.sigmoid().detach() - target)
        valid = label_weight > 0
        tot = max(valid.float().sum().item(), 1.0)
        weights = self._weights(g, valid, tot, pred.dtype)
        loss = F.binary_cross_entropy_with_logits(pred, target, reduction='none')
        return weight_reduce_loss(loss, weights, reduction=reduction,
                                  avg_factor=tot) * self.loss_weight


@MODELS.register_module()
class GHMR(_GHMBase):
    """GHM regression loss on the authentic smooth L1 ``sqrt(d^2 + mu^2) - mu``.

    Args:
        mu (float): of the authentic smooth L1.
        bins (int), momentum (float), loss_weight (float), reduction (str): as :class:`GHMC`.
    """

    def __init__(self, mu=0.02, bins=10, momentum=0, loss_weight=1.0, reduction='mean'):
        super().__init__()
        self.mu = mu
        self._init_bins(bins, momentum, lambda last: last.new_tensor(1e3))
        self.loss_weight = loss_weight
        self.reduction = check_reduction(reduction)

    def forward(self, pred, target, label_weight, avg_factor=None, reduction_override=None):
        """``pred``, ``target``, ``label_weight`` ``[N, 4]`` (or ``[N, 4 * C]``);
        ``avg_factor`` is ignored (the label-weight sum averages), as mmdet."""
        reduction = self._reduction(reduction_override)
        mu = self.mu
        diff = pred - target
        loss = torch.sqrt(diff * diff + mu * mu) - mu
        g = torch.abs(diff / torch.sqrt(mu * mu + diff * diff)).detach()
        valid = label_weight > 0
        tot = max(label_weight.float().sum().item(), 1.0)
        weights = self._weights(g, valid, tot, g.dtype)
        return weight_reduce_loss(loss, weights, reduction=reduction,
                                  avg_factor=tot) * self.loss_weight
