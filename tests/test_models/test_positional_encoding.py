"""mmdet's positional encodings: shapes, values at known positions, keys, errors."""
import math

import pytest
import torch

from ckptzoo.registry import POSITIONAL_ENCODING, build_model


def test_sine_values_and_normalize():
    mask = torch.zeros(2, 3, 4, dtype=torch.bool)
    mask[1, 2:, :] = True
    mask[1, :, 3:] = True
    pos = build_model(dict(type='SinePositionalEncoding', num_feats=4))(mask)
    assert pos.shape == (2, 8, 3, 4)
    # y first: channel 0 is sin(row count / 1), channel 1 cos(row count / 1)
    torch.testing.assert_close(pos[0, 0, :, 0], torch.sin(torch.arange(1., 4.)))
    torch.testing.assert_close(pos[0, 5, 0, :], torch.cos(torch.arange(1., 5.)))
    norm = build_model(dict(type='SinePositionalEncoding', num_feats=4, normalize=True,
                            offset=-0.5))(mask)
    # the last valid row of image 1 (row 1 of 2) sits at (2 - 0.5) / 2 * 2 pi
    torch.testing.assert_close(norm[1, 0, 1, 0], torch.tensor(math.sin(1.5 / (2 + 1e-6) * 2 *
                                                                       math.pi)))
    with pytest.raises(TypeError, match='scale must be a float or int'):
        build_model(dict(type='SinePositionalEncoding', num_feats=4, normalize=True,
                         scale=None))


def test_learned_keys_shape_and_limit():
    enc = POSITIONAL_ENCODING.build(dict(type='LearnedPositionalEncoding', num_feats=4,
                                         row_num_embed=5, col_num_embed=6))
    assert set(enc.state_dict()) == {'row_embed.weight', 'col_embed.weight'}
    pos = enc(torch.zeros(2, 5, 6, dtype=torch.bool))
    assert pos.shape == (2, 8, 5, 6)
    torch.testing.assert_close(pos[1, :4, 3, 2], enc.col_embed.weight[2])  # x first
    torch.testing.assert_close(pos[0, 4:, 3, 2], enc.row_embed.weight[3])
    with pytest.raises(ValueError, match='row_num_embed >= 7'):
        enc(torch.zeros(1, 7, 2, dtype=torch.bool))
