"""EmbeddingRPNHead (Sparse R-CNN's learned proposals): mmdet's keys and init, the decoded
boxes per image size, the batch-expanded features, gradients to both embeddings, bad input."""
import numpy as np
import pytest
import torch

from ckptzoo.registry import build_head

from tests.helpers.checkpointing import one_thread as _one_thread

one_thread = pytest.fixture(autouse=True)(_one_thread)


def _head(**kw):
    torch.manual_seed(0)
    return build_head(dict(type='EmbeddingRPNHead', num_proposals=5,
                           proposal_feature_channel=6, **kw))


def _metas():
    return [dict(img_shape=(40, 60, 3)), dict(img_shape=(32, 20, 3))]


def test_keys_shapes_and_whole_image_init():
    head = _head()
    assert {k: tuple(v.shape) for k, v in head.state_dict().items()} == {
        'init_proposal_bboxes.weight': (5, 4), 'init_proposal_features.weight': (5, 6)}
    w = head.init_proposal_bboxes.weight
    assert torch.equal(w[:, :2], torch.full((5, 2), 0.5)) and torch.equal(w[:, 2:],
                                                                          torch.ones(5, 2))
    assert head.checkpoint_units() == {}
    with torch.no_grad():
        head.init_proposal_bboxes.weight.normal_()
    head.init_weights()  # as mmdet's: whole-image boxes again
    assert torch.equal(head.init_proposal_bboxes.weight[:, 2:], torch.ones(5, 2))


def test_decoded_proposals_features_and_whwh():
    head = _head()
    with torch.no_grad():
        head.init_proposal_bboxes.weight[0] = torch.tensor([0.5, 0.25, 0.2, 0.5])
    feats = [torch.zeros(2, 6, 8, 8, dtype=torch.float64)]
    boxes, features, whwh = head.forward_train(feats, _metas())
    assert boxes.shape == (2, 5, 4) and features.shape == (2, 5, 6) and whwh.shape == (2, 1, 4)
    assert whwh.dtype == torch.float64
    torch.testing.assert_close(whwh[:, 0], torch.tensor([[60., 40., 60., 40.],
                                                         [20., 32., 20., 32.]],
                                                        dtype=torch.float64))
    # proposal 1..4: the whole image; proposal 0: (cx .5, cy .25, w .2, h .5) of 60x40
    torch.testing.assert_close(boxes[0, 1], torch.tensor([0., 0., 60., 40.],
                                                         dtype=torch.float64))
    torch.testing.assert_close(boxes[0, 0], torch.tensor([24., 0., 36., 20.],
                                                         dtype=torch.float64))
    torch.testing.assert_close(boxes[1, 0], torch.tensor([8., 0., 12., 16.],
                                                         dtype=torch.float64))
    assert torch.equal(features[0], head.init_proposal_features.weight.to(features))
    assert torch.equal(features[1], features[0])
    for fn in (head.simple_test_rpn, head.forward_dummy):
        b2, f2, w2 = fn(feats, _metas())
        assert torch.equal(b2, boxes) and torch.equal(f2, features)


def test_gradients_reach_both_embeddings():
    head = _head()
    boxes, features, _ = head.forward_train([torch.zeros(2, 6, 4, 4)], _metas())
    (boxes.sum() + (features * torch.arange(6.)).sum()).backward()
    assert head.init_proposal_bboxes.weight.grad.abs().sum() > 0
    torch.testing.assert_close(head.init_proposal_features.weight.grad,
                               2 * torch.arange(6.).expand(5, 6))


def test_bad_arguments_and_unsupported_calls():
    with pytest.raises(ValueError, match='init_cfg'):
        _head(init_cfg=dict(type='Normal'))
    with pytest.raises(ValueError, match='num_proposals'):
        build_head(dict(type='EmbeddingRPNHead', num_proposals=0))
    with pytest.raises(TypeError, match='unexpected arguments'):
        _head(in_channels=4)
    head = _head(train_cfg=None, test_cfg=None)  # what the detector passes
    with pytest.raises(ValueError, match='img_metas'):
        head.forward_train([torch.zeros(3, 6, 4, 4)], _metas())
    with pytest.raises(NotImplementedError, match='augmentation'):
        head.aug_test_rpn([], [])
    with pytest.raises(NotImplementedError):
        head.simple_test([], [])
    assert np.isfinite(head.init_proposal_features.weight.detach().numpy()).all()
