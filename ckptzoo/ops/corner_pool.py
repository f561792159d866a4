"""mmcv's ``CornerPool`` (CornerNet): each position takes the maximum over the positions from it
to one border, a cumulative max (``torch.cummax``, as mmcv does on torch >= 1.5). mmcv's
naming: ``'top'`` is the max over rows ``>= y`` (what a top-left corner sees below it),
``'bottom'`` over rows ``<= y``, ``'left'`` over columns ``>= x``, ``'right'`` over columns
``<= x``."""
import torch
import torch.nn as nn

__all__ = ['CornerPool']


class CornerPool(nn.Module):
    """Args: ``mode`` one of ``'top'``, ``'bottom'``, ``'left'``, ``'right'``."""

    # (dim, flipped): a flipped cumulative max runs from the far border back
    DIM_FLIP = {'bottom': (2, False), 'left': (3, True), 'right': (3, False), 'top': (2, True)}

    def __init__(self, mode):
        super().__init__()
        if mode not in self.DIM_FLIP:
            raise ValueError(f'CornerPool mode must be one of {", ".join(self.DIM_FLIP)}, '
                             f'got {mode!r}')
        self.mode = mode

    def forward(self, x):
        dim, flip = self.DIM_FLIP[self.mode]
        if flip:
            x = x.flip(dim)
        out = torch.cummax(x, dim=dim)[0]
        return out.flip(dim) if flip else out
