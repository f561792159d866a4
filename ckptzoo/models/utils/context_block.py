"""mmcv 1.x's ``ContextBlock`` (``mmcv/cnn/bricks/context_block.py``), GCNet's global context
block: attention (``'att'``) or average (``'avg'``) pooling to one context vector per image,
then a bottleneck transform (1x1 conv, LayerNorm, ReLU, 1x1 conv) added to
(``'channel_add'``) and / or multiplying through a sigmoid (``'channel_mul'``) the input.
mmcv's arguments, attribute names and state-dict keys (``conv_mask``, ``channel_add_conv.0``,
``.1`` (LayerNorm), ``.3``); its plugin name is ``context_block``."""
import torch
import torch.nn as nn

from .weight_init import constant_init, kaiming_init

__all__ = ['ContextBlock']

_FUSIONS = ('channel_add', 'channel_mul')


def _transform(channels, planes):
    return nn.Sequential(nn.Conv2d(channels, planes, kernel_size=1),
                         nn.LayerNorm([planes, 1, 1]), nn.ReLU(inplace=True),
                         nn.Conv2d(planes, channels, kernel_size=1))


class ContextBlock(nn.Module):
    """Args:
        in_channels (int): channels of the input.
        ratio (float): the transform's bottleneck has ``int(in_channels * ratio)`` channels.
        pooling_type (str): ``'att'`` (attention pooling) or ``'avg'``.
        fusion_types (tuple[str]): non-empty, of ``'channel_add'`` and ``'channel_mul'``.
    """

    _abbr_ = 'context_block'

    def __init__(self, in_channels, ratio, pooling_type='att', fusion_types=('channel_add', )):
        super().__init__()
        if pooling_type not in ('avg', 'att'):
            raise ValueError(f"pooling_type must be 'att' or 'avg', got {pooling_type!r}")
        if not isinstance(fusion_types, (list, tuple)) or not fusion_types \
                or not all(f in _FUSIONS for f in fusion_types):
            raise ValueError(f'fusion_types must be a non-empty list or tuple of '
                             f'{", ".join(_FUSIONS)}, got {fusion_types!r}')
        self.in_channels = in_channels
        self.ratio = ratio
        self.planes = int(in_channels * ratio)
        self.pooling_type = pooling_type
        self.fusion_types = fusion_types
        if pooling_type == 'att':
            self.conv_mask = nn.Conv2d(in_channels, 1, kernel_size=1)
            self.softmax = nn.Softmax(dim=2)
        else:
            self.avg_pool = nn.AdaptiveAvgPool2d(1)
        self.channel_add_conv = (_transform(in_channels, self.planes)
                                 if 'channel_add' in fusion_types else None)
        self.channel_mul_conv = (_transform(in_channels, self.planes)
                                 if 'channel_mul' in fusion_types else None)
        self.reset_parameters()

    def reset_parameters(self):
        """mmcv's: kaiming (fan_in) mask conv, the last conv of each transform zero."""
        if self.pooling_type == 'att':
            kaiming_init(self.conv_mask, mode='fan_in')
            self.conv_mask.inited = True
        for transform in (self.channel_add_conv, self.channel_mul_conv):
            if transform is not None:
                constant_init(transform[-1], 0)

    def spatial_pool(self, x):
        """``[N, C, 1, 1]``: the softmax-weighted (``'att'``) or plain mean of each channel."""
        if self.pooling_type != 'att':
            return self.avg_pool(x)
        n, c, h, w = x.size()
        # mmcv's order of operations (the view of x before the mask conv): the gradients
        # reaching x then add up in mmcv's order, to the bit
        flat = x.view(n, c, h * w).unsqueeze(1)
        mask = self.softmax(self.conv_mask(x).view(n, 1, h * w)).unsqueeze(-1)
        return torch.matmul(flat, mask).view(n, c, 1, 1)

    def forward(self, x):
        context = self.spatial_pool(x)
        out = x
        if self.channel_mul_conv is not None:
            out = out * torch.sigmoid(self.channel_mul_conv(context))
        if self.channel_add_conv is not None:
            out = out + self.channel_add_conv(context)
        return out
