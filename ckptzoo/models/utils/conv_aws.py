"""mmcv 1.x's ``ConvAWS2d`` (``mmcv/cnn/bricks/conv_ws.py``): adaptive weight standardisation,
the conv DetectoRS uses everywhere (``conv_cfg=dict(type='ConvAWS')``) so that its recursive
backbone does not diverge. The weight is standardised per output channel (mean 0, std
``sqrt(var + 1e-5)`` with the unbiased variance) and then given back a fixed (not trained) affine
``weight_gamma * w + weight_beta`` kept in two buffers (``[out_channels, 1, 1, 1]``).

Keys: ``weight`` (``bias``), ``weight_gamma``, ``weight_beta``. A checkpoint of a plain conv
(torchvision's ResNet-50) lacks the two buffers: loading it sets them to the loaded weight's
own per-channel mean and std, so the layer computes exactly the plain conv it was trained as,
and they are not reported missing (mmcv's rule). mmcv decides this by the loaded gamma's sign;
here it is decided by the keys present, and a module the checkpoint does not contain at all
(no ``weight`` either) is left as it is (mmcv would re-derive its buffers from its random
weight).
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

from .builder import CONV_LAYERS

__all__ = ['ConvAWS2d', 'standardise_weight']


def standardise_weight(weight, eps=1e-5):
    """``(mean, std)`` per output channel, ``[C, 1, 1, 1]`` each, as ConvAWS computes them."""
    flat = weight.reshape(weight.size(0), -1)
    mean = flat.mean(dim=1).reshape(-1, 1, 1, 1)
    std = torch.sqrt(flat.var(dim=1) + eps).reshape(-1, 1, 1, 1)
    return mean, std


class ConvAWS2d(nn.Conv2d):
    """mmcv's ``ConvAWS2d``: ``nn.Conv2d``'s arguments (no ``padding_mode``)."""

    # filled in on load when a checkpoint lacks them (see ckptzoo.runner.checkpoint_match)
    _derived_state = ('weight_gamma', 'weight_beta')

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1,
                 groups=1, bias=True):
        super().__init__(in_channels, out_channels, kernel_size, stride=stride, padding=padding,
                         dilation=dilation, groups=groups, bias=bias)
        self.register_buffer('weight_gamma', torch.ones(self.out_channels, 1, 1, 1))
        self.register_buffer('weight_beta', torch.zeros(self.out_channels, 1, 1, 1))

    def _get_weight(self, weight):
        mean, std = standardise_weight(weight)
        return self.weight_gamma * ((weight - mean) / std) + self.weight_beta

    def forward(self, x):
        return F.conv2d(x, self._get_weight(self.weight), self.bias, self.stride, self.padding,
                        self.dilation, self.groups)

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing_keys,
                              unexpected_keys, error_msgs):
        local_missing = []
        super()._load_from_state_dict(state_dict, prefix, local_metadata, strict,
                                      local_missing, unexpected_keys, error_msgs)
        stats = (prefix + 'weight_gamma', prefix + 'weight_beta')
        if prefix + 'weight' in state_dict and not all(k in state_dict for k in stats):
            # a plain conv's weights: the affine gives the standardised weight its scale back
            with torch.no_grad():
                mean, std = standardise_weight(self.weight)
                self.weight_beta.copy_(mean)
                self.weight_gamma.copy_(std)
            local_missing = [k for k in local_missing if k not in stats]
        missing_keys.extend(local_missing)


CONV_LAYERS['ConvAWS'] = ConvAWS2d
