import pytest
import torch

from ckptzoo.core.utils import reduce_mean
from ckptzoo.models.utils import Scale


def test_scale_is_mmcvs():
    scale = Scale(2.5)
    assert list(scale.state_dict()) == ['scale'] and scale.scale.shape == ()
    assert scale.scale.dtype == torch.float32
    x = torch.randn(2, 3, requires_grad=True)
    out = scale(x)
    torch.testing.assert_close(out, 2.5 * x)
    out.sum().backward()
    assert scale.scale.grad.item() == pytest.approx(x.sum().item())
    assert Scale().scale.item() == 1.0
    with pytest.raises(TypeError, match='scale must be a float'):
        Scale('1')


def test_reduce_mean_without_a_process_group_is_the_tensor():
    t = torch.tensor(3.)
    assert reduce_mean(t) is t
