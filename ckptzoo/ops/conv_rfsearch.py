"""mmcv 1.7's receptive-field search convolution (RF-Next, https://arxiv.org/abs/2206.06637):
a ``Conv2d`` whose one weight runs at several dilation rates, the branches mixed by learned
weights, so that training estimates the dilation each layer wants.

:class:`Conv2dRFSearchOp` wraps the convolution it replaces as ``op_layer`` and adds
``branch_weights``: the state-dict keys are mmcv's (``<conv>.op_layer.weight``,
``<conv>.op_layer.bias``, ``<conv>.branch_weights``), so a checkpoint trained with mmcv's
``RFSearchHook`` loads strictly. The search itself (which layers are wrapped, when the rates
move) is :class:`ckptzoo.runner.hooks.rfsearch.RFSearchHook`'s.

Why here and not in ``models/utils`` with the other cnn bricks: the hook (``runner/``) builds
these ops, and ``runner`` may import ``ops`` but not ``models`` (DESIGN.md, "Layout").
"""
from __future__ import annotations

import copy
import logging
from collections.abc import Mapping, Sequence

import torch
import torch.nn as nn
import torch.nn.functional as F

__all__ = ['BaseConvRFSearchOp', 'Conv2dRFSearchOp', 'expand_rates', 'get_single_padding']

logger = logging.getLogger('ckptzoo')


def get_single_padding(kernel_size: int, stride: int = 1, dilation: int = 1) -> int:
    """mmcv's padding of one axis: ``((stride - 1) + dilation * (kernel_size - 1)) // 2``, so
    that every dilation of a branch set gives the same output size (also for stride > 1)."""
    return ((stride - 1) + dilation * (kernel_size - 1)) // 2


def _scaled_rate(rate: int, factor: float, mmin: int, mmax: int) -> int:
    # Python's round (half to even), then clipped to [mmin, mmax], as mmcv (np.clip)
    return int(min(max(int(round(factor * rate)), mmin), mmax))


def expand_rates(dilation: Sequence[int], config: Mapping) -> list[tuple[int, int]]:
    """The dilation rates to try around ``dilation``: ``num_branches // 2`` smaller ones
    (``(1 - exp_rate) * d``), ``dilation`` itself for an odd ``num_branches``, as many larger
    ones (``(1 + exp_rate) * d``), each clipped to ``[mmin, mmax]``; duplicates dropped, first
    occurrence kept (mmcv's order)."""
    exp_rate, mmin, mmax = config['exp_rate'], config['mmin'], config['mmax']
    half = config['num_branches'] // 2
    small = [tuple(_scaled_rate(d, 1 - exp_rate, mmin, mmax) for d in dilation)] * half
    large = [tuple(_scaled_rate(d, 1 + exp_rate, mmin, mmax) for d in dilation)] * half
    middle = [] if config['num_branches'] % 2 == 0 else [tuple(dilation)]
    rates = []
    for rate in small[::-1] + middle + large:
        if rate not in rates:
            rates.append(rate)
    return rates


class BaseConvRFSearchOp(nn.Module):
    """The base of the searchable convolutions: the wrapped layer (``op_layer``) and the
    search settings (``global_config``, mmcv's ``config['search']``).

    ``RFSearchHook`` finds the searchable layers of a model by this class."""

    def __init__(self, op_layer: nn.Module, global_config: Mapping):
        super().__init__()
        self.op_layer = op_layer
        self.global_config = global_config

    @staticmethod
    def normlize(weights: torch.Tensor) -> torch.Tensor:
        """``|w| / sum(|w|)`` (mmcv's name, kept: code written for mmcv calls it)."""
        abs_weights = torch.abs(weights)
        return abs_weights / torch.sum(abs_weights)


class Conv2dRFSearchOp(BaseConvRFSearchOp):
    """A ``Conv2d`` searching its dilation: the output is the sum over ``dilation_rates`` of the
    convolution at that rate (one shared weight, padding per :func:`get_single_padding`)
    times the branch's normalised ``|branch_weights|``; one rate runs the plain convolution.

    Args:
        op_layer (nn.Conv2d): the convolution to wrap (its weight and bias are used as they are).
        global_config (dict): ``init_alphas`` (initial branch weight), ``num_branches`` (2 or
            3), ``exp_rate``, ``mmin``, ``mmax``; other keys (the hook's) are ignored.
        verbose (bool): log the rates when they change. Defaults to True.
    """

    def __init__(self, op_layer: nn.Module, global_config: Mapping, verbose: bool = True):
        super().__init__(op_layer, global_config)
        if not isinstance(global_config, Mapping):
            raise TypeError(f'global_config must be a dict with init_alphas, num_branches, '
                            f'exp_rate, mmin and mmax, got {global_config!r}')
        missing = [k for k in ('init_alphas', 'num_branches', 'exp_rate', 'mmin', 'mmax')
                   if k not in global_config]
        if missing:
            raise KeyError(f'global_config lacks {", ".join(missing)} (the search settings: '
                           'init_alphas, num_branches, exp_rate, mmin, mmax)')
        self.num_branches = global_config['num_branches']
        if self.num_branches not in (2, 3):
            raise ValueError(f'num_branches must be 2 or 3, got {self.num_branches!r}')
        self.verbose = verbose
        self.dilation_rates = self._rates_around(op_layer.dilation)
        self.branch_weights = nn.Parameter(
            torch.empty(self.num_branches, device=op_layer.weight.device))
        if self.verbose:
            logger.info(f'Expand as {self.dilation_rates}')
        nn.init.constant_(self.branch_weights, global_config['init_alphas'])

    def _rates_around(self, dilation):
        """:func:`expand_rates`, an axis whose kernel is 1 or even keeping its dilation."""
        rates = expand_rates(dilation, self.global_config)
        kernel = self.op_layer.kernel_size
        return [tuple(r[i] if kernel[i] > 1 and kernel[i] % 2 else dilation[i] for i in (0, 1))
                for r in rates]

    def get_padding(self, dilation: Sequence[int]) -> tuple[int, int]:
        """The padding at ``dilation`` (per axis, :func:`get_single_padding`)."""
        layer = self.op_layer
        return tuple(get_single_padding(layer.kernel_size[i], layer.stride[i], dilation[i])
                     for i in (0, 1))

    def _conv(self, x, dilation):
        layer = self.op_layer
        return F.conv2d(x, layer.weight, layer.bias, layer.stride, self.get_padding(dilation),
                        dilation, layer.groups)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rates = self.dilation_rates
        if len(rates) == 1:
            return self._conv(x, rates[0])
        weights = self.normlize(self.branch_weights[:len(rates)])
        out = self._conv(x, rates[0]) * weights[0]
        for i in range(1, len(rates)):
            out = out + self._conv(x, rates[i]) * weights[i]
        return out

    def estimate_rates(self) -> None:
        """Settle on one rate: the branch-weighted mean of the rates, rounded and clipped to
        ``[mmin, mmax]``; ``op_layer``'s dilation and padding become it."""
        weights = self.normlize(self.branch_weights[:len(self.dilation_rates)])
        if self.verbose:
            logger.info(f'Estimate dilation {self.dilation_rates} with weight '
                        f'{weights.detach().cpu().numpy().tolist()}.')
        sums, total = [0, 0], 0
        for i, rate in enumerate(self.dilation_rates):
            w = weights[i].item()
            sums = [sums[0] + w * rate[0], sums[1] + w * rate[1]]
            total += w
        mmin, mmax = self.global_config['mmin'], self.global_config['mmax']
        estimated = tuple(int(min(max(int(round(s / total)), mmin), mmax)) for s in sums)
        self.op_layer.dilation = estimated
        self.op_layer.padding = self.get_padding(estimated)
        self.dilation_rates = [estimated]
        if self.verbose:
            logger.info(f'Estimate as {estimated}')

    def expand_rates(self) -> None:
        """Branch again around ``op_layer``'s dilation; the branch weights restart at
        ``init_alphas``."""
        self.dilation_rates = copy.deepcopy(self._rates_around(self.op_layer.dilation))
        if self.verbose:
            logger.info(f'Expand as {self.dilation_rates}')
        nn.init.constant_(self.branch_weights, self.global_config['init_alphas'])

    def extra_repr(self) -> str:
        return f'dilation_rates={self.dilation_rates}'
