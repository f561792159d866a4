"""mmcv 1.x's ``MaskedConv2d`` in plain PyTorch (no compiled mmcv): an ``nn.Conv2d`` (same
arguments and state-dict keys) whose ``forward(x, mask)`` gives the convolution where ``mask``
is set and zero (no bias either) elsewhere; without a mask it is the plain convolution.

mmcv computes only the masked positions (an inference speed-up of guided anchoring), has no
backward and takes one image with one mask (``mask [1, H, W]``). Here the whole convolution is
computed and then masked, so it differentiates and takes a batch: ``mask [B, H, W]`` (or
``[H, W]`` / ``[1, H, W]``, shared by every image); the values are mmcv's.
"""
import torch.nn as nn

__all__ = ['MaskedConv2d']


class MaskedConv2d(nn.Conv2d):
    """mmcv's arguments (those of ``nn.Conv2d``); stride 1 only when masked, as mmcv."""

    def forward(self, input, mask=None):
        if mask is None:
            return super().forward(input)
        if self.stride != (1, 1):
            raise ValueError(f'MaskedConv2d with a mask supports stride 1 only (as mmcv), got '
                             f'stride {self.stride}')
        out = super().forward(input)
        if mask.dim() == 2:
            mask = mask[None]
        if mask.dim() != 3 or mask.shape[-2:] != out.shape[-2:] or \
                mask.size(0) not in (1, out.size(0)):
            raise ValueError(f'MaskedConv2d mask must be [B or 1, {out.size(2)}, {out.size(3)}] '
                             f'for this input, got {tuple(mask.shape)}')
        return out * (mask > 0)[:, None].to(out.dtype)
