"""Conv2dRFSearchOp (mmcv 1.7's RF-Next op): the rates it branches into, its forward as the
weighted sum of dilated convolutions, the estimate / expand rule, mmcv's state-dict keys."""
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from ckptzoo.ops import Conv2dRFSearchOp
from ckptzoo.ops.conv_rfsearch import expand_rates, get_single_padding

SEARCH = dict(step=0, max_step=12, search_interval=1, exp_rate=0.5, init_alphas=0.01, mmin=1,
              mmax=24, num_branches=2, skip_layer=[])


@pytest.mark.parametrize('dilation, num_branches, expected', [
    ((1, 1), 2, [(1, 1), (2, 2)]),          # round(0.5) = 0, clipped to mmin
    ((1, 1), 3, [(1, 1), (2, 2)]),          # the middle rate equals the small one: once
    ((3, 3), 3, [(2, 2), (3, 3), (4, 4)]),  # round(1.5) = 2, round(4.5) = 4 (half to even)
    ((2, 5), 2, [(1, 2), (3, 8)]),          # round(2.5) = 2, round(7.5) = 8
    ((20, 20), 2, [(10, 10), (24, 24)]),    # clipped to mmax
])
def test_expand_rates_by_hand(dilation, num_branches, expected):
    assert expand_rates(dilation, dict(SEARCH, num_branches=num_branches)) == expected


def test_padding_keeps_the_output_size_for_every_rate_and_stride():
    assert get_single_padding(3, 1, 1) == 1 and get_single_padding(3, 1, 4) == 4
    assert get_single_padding(7, 4, 1) == 4 and get_single_padding(3, 2, 2) == 2
    x = torch.randn(1, 2, 33, 31)
    for stride in (1, 2, 4):
        sizes = {F.conv2d(x, torch.randn(2, 2, 3, 3), stride=stride, dilation=d,
                          padding=get_single_padding(3, stride, d)).shape for d in (1, 2, 3, 5)}
        assert len(sizes) == 1, sizes


def test_state_dict_keys_are_mmcvs():
    op = Conv2dRFSearchOp(nn.Conv2d(2, 4, 3, padding=1), SEARCH, verbose=False)
    assert list(op.state_dict()) == ['branch_weights', 'op_layer.weight', 'op_layer.bias']
    assert op.branch_weights.shape == (2, ) and torch.all(op.branch_weights == 0.01)
    assert op.dilation_rates == [(1, 1), (2, 2)]


def test_forward_is_the_weighted_sum_of_the_dilated_convolutions():
    torch.manual_seed(0)
    conv = nn.Conv2d(3, 4, 3, stride=2, padding=1, groups=1)
    op = Conv2dRFSearchOp(conv, dict(SEARCH, num_branches=3), verbose=False)
    op.op_layer.dilation = (2, 2)
    op.dilation_rates = [(1, 1), (2, 2), (3, 3)]
    with torch.no_grad():
        op.branch_weights.copy_(torch.tensor([0.5, -1.0, 2.5]))
    x = torch.randn(2, 3, 17, 19)
    w = torch.tensor([0.5, 1.0, 2.5]) / 4.0
    expected = sum(F.conv2d(x, conv.weight, conv.bias, 2, get_single_padding(3, 2, d), d) * w[i]
                   for i, d in enumerate((1, 2, 3)))
    torch.testing.assert_close(op(x), expected, rtol=0, atol=1e-6)
    op(x).sum().backward()
    assert op.branch_weights.grad is not None and op.op_layer.weight.grad is not None
    op.dilation_rates = [(3, 3)]  # one rate: the plain convolution, the weights unused
    torch.testing.assert_close(op(x), F.conv2d(x, conv.weight, conv.bias, 2, 3, 3))


def test_estimate_then_expand():
    op = Conv2dRFSearchOp(nn.Conv2d(2, 2, 3, padding=1), SEARCH, verbose=False)
    with torch.no_grad():
        op.branch_weights.copy_(torch.tensor([1.0, 3.0]))  # mean rate 0.25 * 1 + 0.75 * 2
    op.estimate_rates()
    assert op.op_layer.dilation == (2, 2) and op.op_layer.padding == (2, 2)
    assert op.dilation_rates == [(2, 2)]
    op.expand_rates()
    assert op.dilation_rates == [(1, 1), (3, 3)] and torch.all(op.branch_weights == 0.01)
    with torch.no_grad():
        op.branch_weights.copy_(torch.tensor([-1.0, 1.0]))  # |w| halfway: the mean rate 2
    op.estimate_rates()
    assert op.op_layer.dilation == (2, 2)


def test_an_axis_with_kernel_1_or_even_keeps_its_dilation():
    op = Conv2dRFSearchOp(nn.Conv2d(2, 2, (1, 3), dilation=(2, 1)), SEARCH, verbose=False)
    assert op.dilation_rates == [(2, 1), (2, 2)]
    op = Conv2dRFSearchOp(nn.Conv2d(2, 2, (3, 4)), SEARCH, verbose=False)
    assert op.dilation_rates == [(1, 1), (2, 1)]


def test_bad_settings_are_refused_by_name():
    conv = nn.Conv2d(2, 2, 3)
    with pytest.raises(ValueError, match='num_branches must be 2 or 3, got 4'):
        Conv2dRFSearchOp(conv, dict(SEARCH, num_branches=4))
    with pytest.raises(KeyError, match='global_config lacks exp_rate'):
        Conv2dRFSearchOp(conv, {k: v for k, v in SEARCH.items() if k != 'exp_rate'})
