"""mmcv 1.x ``GeneralizedAttention`` (ckptzoo/models/utils/generalized_attention.py): mmcv's
keys, shapes and refusals; its terms against hand-computed small cases, mmcv's '0100' quirk
included; GRoIE's extractor with it as ``post_cfg``. (Audited against mmcv 1.7.2 on the same
weights, every attention type and stride: outputs and gradients equal.)"""
import math

import pytest
import torch

from ckptzoo.models.utils import GeneralizedAttention, build_plugin_layer
from ckptzoo.registry import MODELS

TYPES = ('0001', '0010', '0100', '1000', '1111', '1100', '0011')


def _randomise(m, seed=0):
    torch.manual_seed(seed)
    with torch.no_grad():
        for p in m.parameters():
            if p.dtype.is_floating_point:
                p.normal_(0, 0.3)
    return m


@pytest.mark.parametrize('attention_type', TYPES)
@pytest.mark.parametrize('kv_stride,q_stride', [(1, 1), (2, 1), (2, 2), (3, 2)])
def test_shape_and_identity_at_init(attention_type, kv_stride, q_stride):
    m = GeneralizedAttention(24, num_heads=3, attention_type=attention_type,
                             kv_stride=kv_stride, q_stride=q_stride)
    x = torch.randn(2, 24, 7, 7)
    assert torch.equal(m(x), x)  # gamma starts at 0
    y = _randomise(m)(x)
    assert y.shape == x.shape and torch.isfinite(y).all()


def test_state_dict_keys_are_mmcvs():
    def keys(t, **kw):
        return list(GeneralizedAttention(16, num_heads=2, attention_type=t, **kw).state_dict())

    assert keys('1111') == [
        'appr_bias', 'geom_bias', 'gamma', 'query_conv.weight', 'key_conv.weight',
        'value_conv.weight', 'appr_geom_fc_x.weight', 'appr_geom_fc_y.weight',
        'proj_conv.weight', 'proj_conv.bias']
    assert keys('0100') == ['gamma', 'query_conv.weight', 'value_conv.weight',
                            'appr_geom_fc_x.weight', 'appr_geom_fc_y.weight',
                            'proj_conv.weight', 'proj_conv.bias']
    assert keys('0010') == ['appr_bias', 'gamma', 'key_conv.weight', 'value_conv.weight',
                            'proj_conv.weight', 'proj_conv.bias']
    m = GeneralizedAttention(256, num_heads=8, spatial_range=2, attention_type='1000')
    assert m.state_dict()['local_constraint_map'].dtype == torch.uint8
    assert m.local_constraint_map.shape == (84, 84, 42, 42)
    m = GeneralizedAttention(16, num_heads=2, position_embedding_dim=8)
    assert m.appr_geom_fc_x.weight.shape == (16, 4) and m.v_dim == 8


@pytest.mark.parametrize('bad', ['111', '11111', '1121', 'abcd', 1111, ['1', '1', '1', '1']])
def test_bad_attention_type_is_refused_by_name(bad):
    with pytest.raises(ValueError, match='attention_type'):
        GeneralizedAttention(16, num_heads=2, attention_type=bad)


def test_what_mmcv_failed_on_is_refused_clearly():
    with pytest.raises(ValueError, match='spatial_range.*in_channels 256 or 512'):
        GeneralizedAttention(64, num_heads=2, spatial_range=3)
    with pytest.raises(ValueError, match='position_embedding_dim.*multiple of 4'):
        GeneralizedAttention(16, num_heads=2, position_embedding_dim=10)
    GeneralizedAttention(16, num_heads=2, position_embedding_dim=10, attention_type='1010')
    m = GeneralizedAttention(16, num_heads=2, attention_type='0100', kv_stride=1)
    with pytest.raises(ValueError, match='square'):
        m(torch.randn(1, 16, 3, 5))
    m = GeneralizedAttention(16, num_heads=2, attention_type='0101', kv_stride=1)
    assert m(torch.randn(1, 16, 3, 5)).shape == (1, 16, 3, 5)


def test_build_plugin_layer_names_it_as_mmcv():
    name, layer = build_plugin_layer(dict(type='GeneralizedAttention', in_channels=16,
                                          num_heads=2), '_post')
    assert name == 'gen_attention_block_post' and isinstance(layer, GeneralizedAttention)
    assert (layer.kv_stride, layer.q_stride, layer.attention_type) == (2, 1, [True] * 4)
    with pytest.raises(KeyError, match='unknown plugin layer type .ContextBlok'):
        build_plugin_layer(dict(type='ContextBlok', in_channels=16, ratio=0.25))


def test_init_is_mmcvs():
    torch.manual_seed(0)
    m = GeneralizedAttention(32, num_heads=4)
    stdv = 1 / math.sqrt(8 * 2)
    assert m.appr_bias.abs().max() <= stdv and m.geom_bias.abs().max() <= stdv
    assert not m.proj_conv.bias.any() and not m.gamma.any()
    bound = math.sqrt(3.0 / 32)  # uniform Kaiming, leaky_relu a=1 (gain 1), fan_in 32
    assert m.query_conv.weight.abs().max() <= bound
    assert m.query_conv.weight.abs().max() > 0.8 * bound


def _content_only_by_hand(m, x):
    """'1000', one head, kv_stride 1: softmax_j(q_i . k_j) weighted values, projected."""
    n, c, h, w = x.shape
    flat = x.view(n, c, h * w)
    q = torch.einsum('oc,ncp->npo', m.query_conv.weight[:, :, 0, 0], flat)
    k = torch.einsum('oc,ncp->npo', m.key_conv.weight[:, :, 0, 0], flat)
    v = torch.einsum('oc,ncp->npo', m.value_conv.weight[:, :, 0, 0], flat)
    att = torch.softmax(q @ k.transpose(1, 2), dim=-1)
    out = torch.einsum('oc,npc->nop', m.proj_conv.weight[:, :, 0, 0], att @ v)
    out = out + m.proj_conv.bias[None, :, None]
    return m.gamma * out.view(n, c, h, w) + x


def test_content_term_by_hand():
    m = _randomise(GeneralizedAttention(4, num_heads=1, attention_type='1000', kv_stride=1))
    x = torch.randn(2, 4, 3, 2, dtype=torch.float64)
    torch.testing.assert_close(m.double()(x), _content_only_by_hand(m, x))


def test_key_only_term_is_the_same_for_every_query():
    """'0010' softmaxes ``appr_bias . k_j``: every position gets the same attended value."""
    m = _randomise(GeneralizedAttention(4, num_heads=1, attention_type='0010', kv_stride=1))
    x = torch.randn(1, 4, 2, 3, dtype=torch.float64)
    m = m.double()
    k = torch.einsum('oc,cp->po', m.key_conv.weight[:, :, 0, 0], x[0].view(4, 6))
    v = torch.einsum('oc,cp->po', m.value_conv.weight[:, :, 0, 0], x[0].view(4, 6))
    att = torch.softmax(k @ m.appr_bias, dim=0)
    out = m.proj_conv.weight[:, :, 0, 0] @ (att @ v) + m.proj_conv.bias
    torch.testing.assert_close(m(x), m.gamma * out.view(1, 4, 1, 1) + x)


def test_position_embedding_by_hand():
    m = GeneralizedAttention(8, num_heads=1, position_magnitude=2)
    emb_x, emb_y = m.get_position_embedding(2, 3, 2, 2, 1, 2, 'cpu', torch.float64, 8)
    assert emb_x.shape == (3, 2, 4) and emb_y.shape == (2, 2, 4)
    freqs = torch.tensor([1.0, 1000 ** 0.5], dtype=torch.float64)
    for i in range(3):
        for j in range(2):
            d = (i * 1 - j * 2) * 2.0
            torch.testing.assert_close(emb_x[i, j], torch.cat([(d / freqs).sin(),
                                                               (d / freqs).cos()]))


def test_query_position_term_keeps_mmcvs_transposed_rows():
    """'0100' (GRoIE's): energy(a, b; k, l) = q(a, b) . px(b, l) + q(b, a) . py(a, k), the
    second query transposed as mmcv computes it, so GRoIE checkpoints give their results."""
    m = _randomise(GeneralizedAttention(8, num_heads=2, attention_type='0100', kv_stride=1))
    m = m.double()
    x = torch.randn(1, 8, 3, 3, dtype=torch.float64)
    heads, d, s = 2, 4, 3
    q = torch.einsum('oc,cyx->yxo', m.query_conv.weight[:, :, 0, 0], x[0])
    q = q.view(s, s, heads, d)
    emb_x, emb_y = m.get_position_embedding(s, s, s, s, 1, 1, 'cpu', torch.float64, 8)
    px = (m.appr_geom_fc_x(emb_x) / math.sqrt(2)).view(s, s, heads, d)  # [b, l, head, d]
    py = (m.appr_geom_fc_y(emb_y) / math.sqrt(2)).view(s, s, heads, d)  # [a, k, head, d]
    energy = (torch.einsum('abhd,blhd->habl', q, px)[:, :, :, None, :]
              + torch.einsum('bahd,akhd->habk', q, py)[..., None])  # [head, a, b, k, l]
    att = torch.softmax(energy.reshape(heads, s * s, s * s), dim=-1)
    v = torch.einsum('oc,cp->po', m.value_conv.weight[:, :, 0, 0], x[0].view(8, 9))
    v = v.view(9, heads, d).transpose(0, 1)  # [head, kv, d]
    out = (att @ v).permute(0, 2, 1).reshape(8, 9)
    out = m.proj_conv.weight[:, :, 0, 0] @ out + m.proj_conv.bias[:, None]
    torch.testing.assert_close(m(x), m.gamma * out.view(1, 8, 3, 3) + x)


def test_spatial_range_masks_far_keys():
    """A query attends only to keys near it: mmcv's window, keys ``(i - r) // s`` to
    ``(i + r + 1) // s`` (one further on the far side than the range)."""
    m = GeneralizedAttention(256, num_heads=8, spatial_range=1, kv_stride=1,
                             attention_type='1000')
    far = m.local_constraint_map.bool()
    assert not far[5, 5, 4:8, 4:8].any() and far[5, 5, 3].all() and far[5, 5, :, 8].all()
    far2 = GeneralizedAttention(256, num_heads=8, spatial_range=1, kv_stride=2,
                                attention_type='1000').local_constraint_map.bool()
    assert far2.shape == (84, 84, 42, 42)
    assert not far2[5, 5, 2:4, 2:4].any() and far2[5, 5, 1].all() and far2[5, 5, :, 4].all()
    _randomise(m)
    x = torch.zeros(1, 256, 6, 6)
    x[..., 5, 5] = 1e3  # a loud far corner must not reach position (0, 0)
    y = m(x)
    x2 = x.clone()
    x2[..., 5, 5] = -1e3
    torch.testing.assert_close(m(x2)[..., 0, 0], y[..., 0, 0])


def test_groie_extractor_with_attention_post():
    ext = MODELS.build(dict(
        type='GenericRoIExtractor', aggregation='sum',
        roi_layer=dict(type='RoIAlign', output_size=7, sampling_ratio=2), out_channels=24,
        featmap_strides=[4, 8],
        pre_cfg=dict(type='ConvModule', in_channels=24, out_channels=24, kernel_size=5,
                     padding=2, inplace=False),
        post_cfg=dict(type='GeneralizedAttention', in_channels=24, spatial_range=-1,
                      num_heads=6, attention_type='0100', kv_stride=2)))
    assert isinstance(ext.post_module, GeneralizedAttention)
    assert [k for k in ext.state_dict() if k.startswith('post_module.')] == [
        'post_module.gamma', 'post_module.query_conv.weight', 'post_module.value_conv.weight',
        'post_module.appr_geom_fc_x.weight', 'post_module.appr_geom_fc_y.weight',
        'post_module.proj_conv.weight', 'post_module.proj_conv.bias']
    _randomise(ext.post_module)
    feats = [torch.randn(2, 24, 16, 16, requires_grad=True), torch.randn(2, 24, 8, 8)]
    rois = torch.tensor([[0, 4., 4., 40., 30.], [1, 0., 8., 20., 60.]])
    out = ext(feats, rois)
    assert out.shape == (2, 24, 7, 7)
    out.sum().backward()
    assert ext.post_module.query_conv.weight.grad.abs().sum() > 0
