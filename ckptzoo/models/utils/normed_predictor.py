"""mmdet 2.x's ``NormedLinear`` and ``NormedConv2d``: cosine-similarity predictors (weights
and inputs L2-normalised, inputs scaled by a temperature) of the seesaw-loss configs.

The temperature's keyword is mmdet's spelling, ``tempearture``, so configs such as
``cls_predictor_cfg=dict(type='NormedLinear', tempearture=20)`` build unchanged.
"""
import torch.nn as nn
import torch.nn.functional as F

from .builder import CONV_LAYERS, LINEAR_LAYERS

__all__ = ['NormedLinear', 'NormedConv2d']


def _check(name, tempearture, power, eps):
    for key, value in (('tempearture', tempearture), ('power', power), ('eps', eps)):
        if not isinstance(value, (int, float)) or isinstance(value, bool) or value < 0:
            raise ValueError(f'{name} {key} must be a number >= 0, got {value!r}')


class NormedLinear(nn.Linear):
    """``F.linear(t * x / |x|**power, w / |w|**power, bias)`` (row norms, ``eps`` added);
    args ``tempearture`` (20), ``power`` (1.0), ``eps`` (1e-6), then ``nn.Linear``'s. The
    weight is drawn from N(0, 0.01) and the bias zeroed at construction, as mmdet's."""

    def __init__(self, *args, tempearture=20, power=1.0, eps=1e-6, **kwargs):
        super().__init__(*args, **kwargs)
        _check('NormedLinear', tempearture, power, eps)
        self.tempearture = tempearture
        self.power = power
        self.eps = eps
        self.init_weights()

    def init_weights(self):
        nn.init.normal_(self.weight, mean=0, std=0.01)
        if self.bias is not None:
            nn.init.constant_(self.bias, 0)

    def forward(self, x):
        weight = self.weight / (self.weight.norm(dim=1, keepdim=True).pow(self.power) +
                                self.eps)
        x = x / (x.norm(dim=1, keepdim=True).pow(self.power) + self.eps) * self.tempearture
        return F.linear(x, weight, self.bias)


class NormedConv2d(nn.Conv2d):
    """``nn.Conv2d`` of the channel-normalised input (times ``tempearture``) with weights
    normalised over the input channels (``norm_over_kernel=False``) or over each whole
    kernel; args ``tempearture`` (20), ``power`` (1.0), ``eps`` (1e-6),
    ``norm_over_kernel`` (False), then ``nn.Conv2d``'s."""

    def __init__(self, *args, tempearture=20, power=1.0, eps=1e-6, norm_over_kernel=False,
                 **kwargs):
        super().__init__(*args, **kwargs)
        _check('NormedConv2d', tempearture, power, eps)
        self.tempearture = tempearture
        self.power = power
        self.norm_over_kernel = norm_over_kernel
        self.eps = eps

    def forward(self, x):
        if self.norm_over_kernel:
            norm = self.weight.view(self.weight.size(0), -1).norm(dim=1, keepdim=True)
            norm = norm.pow(self.power)[..., None, None]
        else:
            norm = self.weight.norm(dim=1, keepdim=True).pow(self.power)
        weight = self.weight / (norm + self.eps)
        x = x / (x.norm(dim=1, keepdim=True).pow(self.power) + self.eps) * self.tempearture
        return self._conv_forward(x, weight, self.bias)


LINEAR_LAYERS['NormedLinear'] = NormedLinear
CONV_LAYERS['NormedConv2d'] = NormedConv2d
