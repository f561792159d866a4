"""NormedLinear / NormedConv2d (ckptzoo/models/utils/normed_predictor.py), built by name with
mmdet's misspelt ``tempearture`` key."""
import pytest
import torch
import torch.nn.functional as F

from ckptzoo.models.utils import build_conv_layer, build_linear_layer


def test_normed_linear_is_a_scaled_cosine():
    layer = build_linear_layer(dict(type='NormedLinear', tempearture=20), 4, 3)
    assert type(layer).__name__ == 'NormedLinear' and layer.tempearture == 20
    assert torch.all(layer.bias == 0) and layer.weight.std() < 0.05  # N(0, 0.01) init
    x = torch.randn(5, 4)
    w = layer.weight / (layer.weight.norm(dim=1, keepdim=True) + 1e-6)
    xn = x / (x.norm(dim=1, keepdim=True) + 1e-6)
    torch.testing.assert_close(layer(x), 20 * xn @ w.t())
    torch.testing.assert_close(layer(x), 20 * F.normalize(x) @ F.normalize(layer.weight).t(),
                               rtol=1e-3, atol=1e-2)  # a scaled cosine, up to eps
    assert set(layer.state_dict()) == {'weight', 'bias'}


@pytest.mark.parametrize('over_kernel', [False, True])
def test_normed_conv2d(over_kernel):
    conv = build_conv_layer(dict(type='NormedConv2d', tempearture=10,
                                 norm_over_kernel=over_kernel), 4, 2, 1)
    x = torch.randn(1, 4, 3, 3)
    w = conv.weight.flatten(1)
    w = w / (w.norm(dim=1, keepdim=True) + 1e-6)
    xn = x / (x.norm(dim=1, keepdim=True) + 1e-6) * 10
    expected = torch.einsum('oc,bchw->bohw', w, xn) + conv.bias[None, :, None, None]
    torch.testing.assert_close(conv(x), expected, rtol=1e-4, atol=1e-4)


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match='tempearture'):
        build_linear_layer(dict(type='NormedLinear', tempearture=-1), 4, 3)
    with pytest.raises(NotImplementedError, match='NoSuchConv'):
        build_conv_layer(dict(type='NoSuchConv'), 4, 2, 1)
    assert type(build_linear_layer(None, 2, 2)) is torch.nn.Linear
