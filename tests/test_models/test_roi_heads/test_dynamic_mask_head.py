"""DynamicMaskHead (QueryInst's mask branch): mmdet's state-dict keys and order, its init, the
forward shapes, the Dice loss of the label channels over the positives, bad input."""
import pytest
import torch

from ckptzoo.registry import build_head

from tests.helpers.checkpointing import one_thread as _one_thread
from tests.helpers.sparse_rcnn import dynamic_mask_head_cfg

one_thread = pytest.fixture(autouse=True)(_one_thread)

# mmdet 2.28.2's DynamicMaskHead of dynamic_mask_head_cfg(), in its order
MMDET_KEYS = [
    ('convs.0.conv.weight', (16, 16, 3, 3)), ('convs.0.bn.weight', (16, )),
    ('convs.0.bn.bias', (16, )), ('convs.0.bn.running_mean', (16, )),
    ('convs.0.bn.running_var', (16, )), ('convs.0.bn.num_batches_tracked', ()),
    ('convs.1.conv.weight', (16, 16, 3, 3)), ('convs.1.bn.weight', (16, )),
    ('convs.1.bn.bias', (16, )), ('convs.1.bn.running_mean', (16, )),
    ('convs.1.bn.running_var', (16, )), ('convs.1.bn.num_batches_tracked', ()),
    ('upsample.weight', (16, 16, 2, 2)), ('upsample.bias', (16, )),
    ('conv_logits.weight', (3, 16, 1, 1)), ('conv_logits.bias', (3, )),
    ('instance_interactive_conv.dynamic_layer.weight', (256, 16)),
    ('instance_interactive_conv.dynamic_layer.bias', (256, )),
    ('instance_interactive_conv.norm_in.weight', (8, )),
    ('instance_interactive_conv.norm_in.bias', (8, )),
    ('instance_interactive_conv.norm_out.weight', (16, )),
    ('instance_interactive_conv.norm_out.bias', (16, ))]


def _head(**kw):
    torch.manual_seed(0)
    return build_head(dict(dynamic_mask_head_cfg(), **kw))


def test_keys_and_init_as_mmdet():
    head = _head()
    assert [(k, tuple(v.shape)) for k, v in head.state_dict().items()] == MMDET_KEYS
    # construction: mmdet's construction-time init, which mmdet's QueryInst keeps (its
    # init_weights never reaches the mask heads): PyTorch's defaults, U(+-1/sqrt(fan_in)), for
    # upsample (fan_in 16 * 2 * 2), conv_logits (16) and the DynamicConv (16)
    for t, fan_in in ((head.upsample.weight, 64), (head.upsample.bias, 64),
                      (head.conv_logits.weight, 16), (head.conv_logits.bias, 16),
                      (head.instance_interactive_conv.dynamic_layer.weight, 16)):
        assert t.abs().max() <= fan_in ** -0.5
    assert (head.conv_logits.bias != 0).all() and (head.upsample.bias != 0).all()
    xavier_dynamic = (6 / (16 + 256)) ** 0.5
    assert head.instance_interactive_conv.dynamic_layer.weight.abs().max() > xavier_dynamic
    # init_weights() on the head itself: mmdet's (Xavier weight matrices, conv_logits bias 0)
    head.init_weights()
    assert torch.equal(head.conv_logits.bias, torch.zeros(3))
    bound = (6 / (16 * 9 + 16 * 9)) ** 0.5  # xavier uniform of a 3x3 conv
    assert head.convs[0].conv.weight.abs().max() <= bound
    assert head.instance_interactive_conv.dynamic_layer.weight.abs().max() <= xavier_dynamic


def test_forward_and_loss():
    head = _head()
    roi = torch.randn(4, 16, 14, 14)
    mask_pred = head(roi, torch.randn(4, 16))
    assert mask_pred.shape == (4, 3, 28, 28)
    assert head(roi, torch.randn(2, 2, 16)).shape == (4, 3, 28, 28)  # [B, N, C] queries
    labels = torch.tensor([2, 0, 1, 2])
    targets = (torch.rand(4, 28, 28) > 0.5).float()
    loss = head.loss(mask_pred, targets, labels)['loss_mask']
    probs = mask_pred[torch.arange(4), labels].sigmoid().flatten(1)
    t = targets.flatten(1)
    dice = 1 - (2 * (probs * t).sum(1)) / ((probs * probs).sum(1) + 1e-5 + (t * t).sum(1)
                                            + 1e-5)
    torch.testing.assert_close(loss, 8.0 * dice.sum() / 4)
    loss.backward()
    empty = head.loss(mask_pred[:0], targets[:0], labels[:0])['loss_mask']
    assert empty == 0 and empty.requires_grad


def test_bad_arguments():
    with pytest.raises(ValueError, match='class_agnostic'):
        _head(class_agnostic=True)
    with pytest.raises(ValueError, match='init_cfg'):
        _head(init_cfg=dict(type='Xavier'))
