"""BaseMaskHead (mmdet 2.28.2's interface): forward_train = forward + loss, simple_test =
forward + get_results, positive_infos / instances_list handed to forward, a non-tuple
forward refused."""
import pytest
import torch

from ckptzoo.models.dense_heads import BaseMaskHead


class _Head(BaseMaskHead):
    def __init__(self, tuple_out=True):
        super().__init__()
        self.tuple_out = tuple_out

    def forward(self, x, extra=None, instances_list=None):
        self.extra = extra if extra is not None else instances_list
        return (x[0] * 2, ) if self.tuple_out else x[0]

    def loss(self, pred, gt_labels, gt_masks, img_metas, **kwargs):
        return dict(loss_mask=pred.sum(), kwargs=sorted(kwargs))

    def get_results(self, pred, img_metas, rescale=False, instances_list=None):
        return [dict(scores=pred.flatten(), rescale=rescale)] * len(img_metas)


def test_forward_train_and_simple_test():
    head = _Head()
    x = [torch.ones(1, 1, 2, 2)]
    losses = head.forward_train(x, [None], [None], [{}])
    assert losses['loss_mask'] == 8 and head.extra is None
    assert losses['kwargs'] == ['gt_bboxes', 'gt_bboxes_ignore', 'positive_infos']
    head.forward_train(x, [None], [None], [{}], positive_infos=['p'])
    assert head.extra == ['p']
    results = head.simple_test(x, [{}, {}], rescale=True)
    assert len(results) == 2 and results[0]['rescale'] is True
    head.simple_test(x, [{}], instances_list=['i'])
    assert head.extra == ['i']


def test_forward_must_give_a_tuple_and_base_methods_refuse():
    with pytest.raises(TypeError, match='tuple'):
        _Head(tuple_out=False).forward_train([torch.ones(1)], [None], [None], [{}])
    with pytest.raises(NotImplementedError):
        BaseMaskHead().loss()
    with pytest.raises(NotImplementedError):
        BaseMaskHead().get_results()
