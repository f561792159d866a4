"""mmdet 2.x ``accuracy``: top-k classification accuracy in percent, logged beside the losses
(the RoI head's ``acc``)."""
import torch.nn as nn

__all__ = ['accuracy', 'Accuracy']


def accuracy(pred, target, topk=1, thresh=None):
    """Percent of the ``N`` rows of ``pred [N, C]`` whose top-``k`` classes hold ``target [N]``
    (and score above ``thresh`` when given); a tensor of shape [1] (0 for no rows), or a list
    of them for a tuple ``topk``."""
    if not isinstance(topk, (int, tuple)):
        raise TypeError(f'topk must be an int or a tuple of ints, got {topk!r}')
    single = isinstance(topk, int)
    topk = (topk, ) if single else topk
    if pred.size(0) == 0:
        accu = [pred.new_tensor(0.) for _ in topk]
        return accu[0] if single else accu
    if pred.dim() != 2 or target.dim() != 1 or pred.size(0) != target.size(0):
        raise ValueError(f'accuracy takes pred [N, C] and target [N], got '
                         f'{tuple(pred.shape)} and {tuple(target.shape)}')
    maxk = max(topk)
    if maxk > pred.size(1):
        raise ValueError(f'topk {maxk} exceeds the {pred.size(1)} classes of pred')
    pred_value, pred_label = pred.topk(maxk, dim=1)
    pred_label = pred_label.t()
    correct = pred_label.eq(target.view(1, -1).expand_as(pred_label))
    if thresh is not None:
        correct = correct & (pred_value > thresh).t()
    res = [correct[:k].reshape(-1).float().sum(0, keepdim=True).mul_(100.0 / pred.size(0))
           for k in topk]
    return res[0] if single else res


class Accuracy(nn.Module):
    """:func:`accuracy` as a module (``topk`` default ``(1, )``, ``thresh``)."""

    def __init__(self, topk=(1, ), thresh=None):
        super().__init__()
        self.topk = topk
        self.thresh = thresh

    def forward(self, pred, target):
        return accuracy(pred, target, self.topk, self.thresh)
