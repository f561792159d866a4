"""SeesawLoss (ckptzoo/models/losses/seesaw_loss.py): the plain cross entropy when the seesaw
factors are off, the factors by hand, and the custom-classifier protocol."""
import math

import pytest
import torch
import torch.nn.functional as F

from ckptzoo.registry import build_loss


def _seesaw(**kw):
    return build_loss(dict(dict(type='SeesawLoss', num_classes=3), **kw))


def test_without_factors_it_is_two_cross_entropies():
    torch.manual_seed(0)
    score = torch.randn(6, 5)
    labels = torch.tensor([0, 1, 2, 3, 3, 1])  # 3 = background
    out = _seesaw(p=0., q=0.)(score, labels)
    pos = labels < 3
    torch.testing.assert_close(out['loss_cls_classes'],
                               F.cross_entropy(score[pos, :3], labels[pos]))  # mean over the positives
    torch.testing.assert_close(out['loss_cls_objectness'],
                               F.cross_entropy(score[:, 3:], (labels == 3).long()))
    total = _seesaw(p=0., q=0., return_dict=False)(score, labels)
    torch.testing.assert_close(total, out['loss_cls_classes'] + out['loss_cls_objectness'])


def test_mitigation_factor_by_hand_and_cum_samples():
    loss = _seesaw(p=1.0, q=0., reduction='none')
    loss(torch.zeros(3, 5), torch.tensor([0, 0, 1]))  # counts: class 0 twice, class 1 once
    assert loss.cum_samples.tolist() == [2., 1., 0., 0.]
    assert 'cum_samples' in loss.state_dict()
    # label 0 (N=4 after this call): class 1 (N=1) weighted 1/4, class 2 (N clamped to 1) 1/4
    out = loss(torch.zeros(2, 5), torch.tensor([0, 0]))
    expected = -math.log(1 / (1 + 0.25 + 0.25))
    torch.testing.assert_close(out['loss_cls_classes'], torch.full((2, ), expected))
    assert loss.cum_samples.tolist() == [4., 1., 0., 0.]


def test_compensation_factor_by_hand():
    # label 0 scored below class 1: class 1's logit grows by q * log(s1 / s0)
    score = torch.tensor([[0., math.log(2.), 0., 0., 0.]])
    out = _seesaw(p=0., q=1.0, reduction='none')(score, torch.tensor([0]))
    expected = -math.log(1 / (1 + 2 * 2 + 1))
    torch.testing.assert_close(out['loss_cls_classes'], torch.tensor([expected]))


def test_protocol():
    loss = _seesaw()
    assert loss.custom_cls_channels and loss.custom_activation and loss.custom_accuracy
    assert loss.get_cls_channels(3) == 5
    score = torch.tensor([[2., 0., 0., 0., 0.], [0., 0., 0., -5., 5.]])
    probs = loss.get_activation(score)
    assert probs.shape == (2, 4)
    torch.testing.assert_close(probs.sum(-1), torch.ones(2))
    torch.testing.assert_close(probs[0, 3], torch.tensor(0.5))  # objectness 0 vs 0
    acc = loss.get_accuracy(score, torch.tensor([0, 3]))
    assert set(acc) == {'acc_objectness', 'acc_classes'}
    torch.testing.assert_close(acc['acc_classes'], torch.tensor([100.]))
    torch.testing.assert_close(acc['acc_objectness'], torch.tensor([100.]))


def test_no_positives_gives_a_connected_zero():
    score = torch.randn(2, 5, requires_grad=True)
    out = _seesaw()(score, torch.tensor([3, 3]))
    assert out['loss_cls_classes'].item() == 0 and out['loss_cls_classes'].requires_grad


@pytest.mark.parametrize('kw, match', [(dict(use_sigmoid=True), 'use_sigmoid'),
                                       (dict(num_classes=0), 'num_classes'),
                                       (dict(p=-1), 'p'), (dict(eps=-0.1), 'eps'),
                                       (dict(reduction='avg'), 'reduction')])
def test_bad_arguments_are_refused(kw, match):
    with pytest.raises(ValueError, match=match):
        _seesaw(**kw)


def test_wrong_channels_are_refused():
    with pytest.raises(ValueError, match='num_classes'):
        _seesaw()(torch.zeros(2, 4), torch.tensor([0, 1]))
    with pytest.raises(ValueError, match='num_classes'):
        _seesaw().get_cls_channels(4)
