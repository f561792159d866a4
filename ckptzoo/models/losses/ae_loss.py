"""mmdet 2.x ``AssociativeEmbeddingLoss`` (Newell et al. 2017; CornerNet's corner grouping):
per image, a pull loss drawing each object's two corner embeddings to their mean and a push
loss (margin 1) driving the means of different objects apart."""
import torch
import torch.nn as nn
import torch.nn.functional as F

from ...registry import MODELS

__all__ = ['AssociativeEmbeddingLoss', 'ae_loss_per_image']


def ae_loss_per_image(tl_preds, br_preds, match):
    """``tl_preds`` / ``br_preds`` ``[M, H, W]`` embeddings; ``match`` per object
    ``[[tl_y, tl_x], [br_y, br_x]]``. Returns ``(pull, push)`` (zeros keeping the graph when
    there is no object, push also with one)."""
    if len(match) == 0:
        return tl_preds.sum() * 0., tl_preds.sum() * 0.
    tl = torch.cat([tl_preds[:, ty, tx].view(-1, 1) for (ty, tx), _ in match])
    br = torch.cat([br_preds[:, by, bx].view(-1, 1) for _, (by, bx) in match])
    mean = (tl + br) / 2.0
    n, m = tl.size()
    pull = ((tl - mean).pow(2) + (br - mean).pow(2)).sum() / n
    margin = 1
    conf = mean.expand((n, n, m)).permute(1, 0, 2) - mean
    conf = (1 - torch.eye(n).type_as(mean)) * (margin - conf.sum(-1).abs())
    push = F.relu(conf).sum() / (n * (n - 1)) if n > 1 else tl_preds.sum() * 0.
    return pull, push


@MODELS.register_module()
class AssociativeEmbeddingLoss(nn.Module):
    """Args (mmdet's): ``pull_weight``, ``push_weight``. ``forward(pred, target, match)``:
    top-left and bottom-right embeddings ``[B, M, H, W]`` and per image the corner matches;
    returns ``(pull, push)`` summed over the images."""

    def __init__(self, pull_weight=0.25, push_weight=0.25):
        super().__init__()
        self.pull_weight = pull_weight
        self.push_weight = push_weight

    def forward(self, pred, target, match):
        if len(match) != pred.size(0):
            raise ValueError(f'AssociativeEmbeddingLoss needs one match list per image '
                             f'({pred.size(0)}), got {len(match)}')
        pull_all, push_all = 0.0, 0.0
        for i in range(pred.size(0)):
            pull, push = ae_loss_per_image(pred[i], target[i], match[i])
            pull_all += self.pull_weight * pull
            push_all += self.push_weight * push
        return pull_all, push_all
