"""GARetinaHead (mmdet 2.x's): keys and shapes, the two adapted towers, losses and detections,
every checkpoint mode exact."""
import math

import pytest
import torch

from ckptzoo.models.checkpointing import MODES

from tests.helpers.checkpointing import one_thread as _one_thread
from tests.helpers.ga_heads import build, ga_head_cfg, inputs, train_run

one_thread = pytest.fixture(autouse=True)(_one_thread)


def _head(**kw):
    return build(ga_head_cfg('GARetinaHead', **kw))


def test_keys_shapes_and_priors_as_mmdet():
    head = _head()
    shapes = {k: tuple(v.shape) for k, v in head.state_dict().items()}
    expected = {f'{t}_convs.{i}.conv.{p}': (8, 8, 3, 3) if p == 'weight' else (8, )
                for t in ('cls', 'reg') for i in range(2) for p in ('weight', 'bias')}
    expected.update({'conv_loc.weight': (1, 8, 1, 1), 'conv_loc.bias': (1, ),
                     'conv_shape.weight': (2, 8, 1, 1), 'conv_shape.bias': (2, ),
                     'retina_cls.weight': (3, 8, 3, 3), 'retina_cls.bias': (3, ),
                     'retina_reg.weight': (4, 8, 3, 3), 'retina_reg.bias': (4, )})
    for branch in ('cls', 'reg'):
        expected[f'feature_adaption_{branch}.conv_offset.weight'] = (36, 2, 1, 1)
        expected[f'feature_adaption_{branch}.conv_adaption.weight'] = (8, 8, 3, 3)
    assert shapes == expected
    prior = math.log(0.01 / 0.99)
    torch.testing.assert_close(head.retina_cls.bias, torch.full((3, ), prior))
    torch.testing.assert_close(head.conv_loc.bias, torch.full((1, ), prior))
    assert (head.retina_reg.bias == 0).all() and head.retina_reg.weight.std() < 0.03


def test_gn_towers_and_forward_shapes():
    head = _head(norm_cfg=dict(type='GN', num_groups=4, requires_grad=True))
    assert 'cls_convs.0.gn.weight' in head.state_dict()
    feats, _, _, _ = inputs()
    cls, reg, shape, loc = head(feats)
    assert [tuple(c.shape) for c in cls] == [(2, 3, 4, 4), (2, 3, 2, 2)]
    assert [tuple(r.shape) for r in reg] == [(2, 4, 4, 4), (2, 4, 2, 2)]
    assert [tuple(s.shape) for s in shape] == [(2, 2, 4, 4), (2, 2, 2, 2)]
    assert [tuple(x.shape) for x in loc] == [(2, 1, 4, 4), (2, 1, 2, 2)]


def test_losses_detections_and_aug_test_refused():
    head = _head()
    losses, grads = train_run(head)
    assert set(losses) == {'loss_cls', 'loss_bbox', 'loss_shape', 'loss_loc'}
    assert all(math.isfinite(x) for v in losses.values() for x in v)
    assert all(g.abs().sum() > 0 for g in grads.values())
    head.eval()
    feats, metas, _, _ = inputs()
    with torch.no_grad():
        (dets, labels), _ = head.simple_test(feats, metas, rescale=True)
        with pytest.raises(NotImplementedError, match='augmentation'):
            head.aug_test([feats], [metas[:1]])
    assert dets.shape[1] == 5 and len(dets) == len(labels) > 0


@pytest.mark.parametrize('mode,reentrant', [(m, False) for m in MODES if m] + [('full', True)])
def test_every_checkpoint_mode_is_exact(mode, reentrant):
    ref = train_run(_head(cp_use_reentrant=reentrant))
    head = _head(cp_use_reentrant=reentrant)
    head.set_checkpoint_plan({'*': mode})
    losses, grads = train_run(head)
    assert losses == ref[0] and grads.keys() == ref[1].keys()
    assert all(torch.equal(grads[k], ref[1][k]) for k in grads)


def test_no_position_kept_gives_no_detection():
    """Every location filtered out at test: empty results (mmdet fails on torch.cat([]))."""
    head = _head()
    with torch.no_grad():
        head.conv_loc.bias.fill_(-50.)
    head.eval()
    feats, metas, _, _ = inputs()
    with torch.no_grad():
        results = head.simple_test(feats, metas)
    assert all(d.shape == (0, 5) and l.shape == (0, ) for d, l in results)
