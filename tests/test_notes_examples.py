"""The lecture notes' worked examples, recomputed with the real modules.

Expected values are the correct arithmetic, written here from the formulas (not from our code);
where the notes print something else, the comment says what and why.
"""

import math

import pytest
import torch

from transformer.model.attention import attention_reference, identity_attention
from transformer.model.embeddings import sinusoidal_table
from transformer.model.layers import LayerNorm, layer_norm_reference
from transformer.model.masks import combined_mask, look_ahead_mask, padding_mask

# Notes (seed 004): "The", "CAT", "SAT" embedded in 4 dimensions.
THE_CAT_SAT = torch.tensor([[1.0, 0, 1, 0], [0, 1, 0, 1], [1, 1, 1, 1]])


def softmax_list(xs):
    exps = [math.exp(x) for x in xs]
    return [e / sum(exps) for e in exps]


def test_the_cat_sat_self_attention_weights_and_output():
    # W_Q = W_K = W_V = W_O = I, d_k = 4, one head: the notes' setting.
    mha = identity_attention(d_model=4, n_heads=1)
    x = THE_CAT_SAT[None]  # (1, 3, 4)
    out, weights = mha(x, x, x, need_weights=True)

    # Scores Q·Kᵀ are [[2,0,2],[0,2,2],[2,2,4]]; divided by √4 = 2.
    expected = torch.tensor(
        [softmax_list([1, 0, 1]), softmax_list([0, 1, 1]), softmax_list([1, 1, 2])]
    )
    torch.testing.assert_close(weights[0, 0], expected, atol=1e-6, rtol=0)
    # The notes' rounded values; they print 0.5762 for the last, the true value is 0.57612.
    torch.testing.assert_close(
        weights[0, 0],
        torch.tensor(
            [[0.4223, 0.1554, 0.4223], [0.1554, 0.4223, 0.4223], [0.2119, 0.2119, 0.5761]]
        ),
        atol=1e-4,
        rtol=0,
    )
    # Output for "The" = 0.4223·[1,0,1,0] + 0.1554·[0,1,0,1] + 0.4223·[1,1,1,1]
    #                  = [0.8446, 0.5777, 0.8446, 0.5777].
    # The notes print [1.2669, 0.9999, 1.2669, 0.9999]: an arithmetic slip. Their entries 1 and 3
    # are 3 x 0.4223 and entries 2 and 4 are the sum of all three weights, as if every value
    # vector were [1, 1, 1, 1]. An output is a weighted average of 0/1 vectors, so no entry can
    # exceed 1.
    w = expected[0]
    the_output = w[0] * THE_CAT_SAT[0] + w[1] * THE_CAT_SAT[1] + w[2] * THE_CAT_SAT[2]
    torch.testing.assert_close(out[0, 0], the_output, atol=1e-6, rtol=0)
    torch.testing.assert_close(
        out[0, 0], torch.tensor([0.8446, 0.5777, 0.8446, 0.5777]), atol=1e-4, rtol=0
    )
    assert not torch.allclose(out[0, 0], torch.tensor([1.2669, 0.9999, 1.2669, 0.9999]), atol=1e-2)


def test_scaling_keeps_softmax_from_saturating():
    # Q = [2,3,4,1], K1 = [1,0,1,0], K2 = [0,1,0,1]: raw scores [6, 4].
    q = torch.tensor([[[[2.0, 3, 4, 1]]]])  # (1, 1, 1, 4)
    k = torch.tensor([[[[1.0, 0, 1, 0], [0, 1, 0, 1]]]])  # (1, 1, 2, 4)
    raw = (q @ k.transpose(-2, -1))[0, 0, 0]
    assert raw.tolist() == [6.0, 4.0]
    # Unscaled: 1/(1+e^-2) = 0.881 and 0.119.
    torch.testing.assert_close(raw.softmax(-1), torch.tensor([0.8808, 0.1192]), atol=1e-4, rtol=0)
    # Scaled by √d_k = 2 (the notes write 6/√2 but compute 6/2): softmax([3, 2]) = [0.731, 0.269].
    _, weights = attention_reference(q, k, k)
    expected = torch.tensor(softmax_list([3, 2]))
    torch.testing.assert_close(weights[0, 0, 0], expected, atol=1e-6, rtol=0)
    torch.testing.assert_close(weights[0, 0, 0], torch.tensor([0.7311, 0.2689]), atol=1e-4, rtol=0)


def test_layer_norm_of_2_4_6_8():
    norm = LayerNorm(4, eps=1e-5)
    x = torch.tensor([2.0, 4.0, 6.0, 8.0])
    y = norm(x)
    torch.testing.assert_close(layer_norm_reference(x, norm.gamma, norm.beta, 1e-5), y)
    # μ = 5, σ² = 5, √(5 + 1e-5) = 2.23607.
    sd = math.sqrt(5.0 + 1e-5)
    expected = torch.tensor([(v - 5.0) / sd for v in (2.0, 4.0, 6.0, 8.0)])
    torch.testing.assert_close(y, expected, atol=1e-6, rtol=0)
    torch.testing.assert_close(y, torch.tensor([-1.342, -0.447, 0.447, 1.342]), atol=1e-3, rtol=0)
    # γ and β scale and shift.
    with torch.no_grad():
        norm.gamma.fill_(2.0)
        norm.beta.fill_(1.0)
    torch.testing.assert_close(norm(torch.tensor([2.0, 4.0, 6.0, 8.0])), 2 * expected + 1)


def test_positional_encoding_d_model_4():
    pe = sinusoidal_table(max_positions=2, d_model=4)
    assert pe[0].tolist() == [0.0, 1.0, 0.0, 1.0]
    # pos 1: sin(1), cos(1), sin(1/10000^(2/4)) = sin(0.01), cos(0.01).
    # The notes write the exponent of PE(1,1) as 1/4 but compute cos(1) = 0.5403, which is right
    # (both members of a sin/cos pair share 2i/d); their figure shows 0.39 for cos(0.01) = 0.99995.
    expected = torch.tensor([math.sin(1), math.cos(1), math.sin(0.01), math.cos(0.01)])
    torch.testing.assert_close(pe[1], expected, atol=1e-6, rtol=0)
    torch.testing.assert_close(
        pe[1], torch.tensor([0.8415, 0.5403, 0.0100, 0.99995]), atol=1e-4, rtol=0
    )


def test_decoder_masking_example():
    # 4 target tokens, the last is padding; Q = K = V = the embeddings below (W = I), d_k = 4.
    emb = torch.tensor(
        [[0.1, 0.2, 0.3, 0.4], [0.5, 0.6, 0.7, 0.8], [0.9, 1.0, 1.1, 1.2], [0.0, 0.0, 0.0, 0.0]]
    )
    ids = torch.tensor([[5, 6, 7, 0]])  # id 0 is padding
    look_ahead = look_ahead_mask(4)[0, 0]
    assert look_ahead.int().tolist() == [[1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0], [1, 1, 1, 1]]
    assert padding_mask(ids)[0, 0, 0].int().tolist() == [1, 1, 1, 0]
    mask = combined_mask(ids)  # (1, 1, 4, 4)
    # The notes' combined mask (element-wise product of look-ahead and key padding).
    assert mask[0, 0].int().tolist() == [[1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0], [1, 1, 1, 0]]

    x = emb[None, None]  # (1, 1, 4, 4)
    scores = (x @ x.transpose(-2, -1))[0, 0]
    # Raw Q·Kᵀ: rows 2 and 3 are [0.7, 1.74, 2.78] and [1.1, 2.78, 4.46]. The notes print
    # 1.9, 3.1 and 5.1 (wrong sums) and call the unscaled matrix "Q·Kᵀ/2".
    torch.testing.assert_close(
        scores[:3, :3],
        torch.tensor([[0.3, 0.7, 1.1], [0.7, 1.74, 2.78], [1.1, 2.78, 4.46]]),
        atol=1e-5,
        rtol=0,
    )
    _, weights = attention_reference(x, x, x, mask)
    expected = torch.tensor(
        [
            [1.0, 0.0, 0.0, 0.0],
            softmax_list([0.35, 0.87]) + [0.0, 0.0],
            softmax_list([0.55, 1.39, 2.23]) + [0.0],
            # The padding query's scores are all 0, so its three allowed keys share equally.
            # The notes give [1, 0, 0, 0] for this row, which contradicts their own masked
            # scores [0, 0, 0, -inf].
            [1 / 3, 1 / 3, 1 / 3, 0.0],
        ]
    )
    torch.testing.assert_close(weights[0, 0], expected, atol=1e-6, rtol=0)
    # The notes give rows 2 and 3 as [0.3, 0.7] and [0.1, 0.3, 0.6]. The second is a rounding of
    # these values; the first is not (0.3729 rounds to 0.4): it is the softmax of the unscaled
    # scores [0.7, 1.74], [0.261, 0.739], so the notes skipped the division by √d_k there.
    torch.testing.assert_close(
        weights[0, 0, 1:3, :3],
        torch.tensor([[0.3729, 0.6271, 0.0], [0.1152, 0.2668, 0.6180]]),
        atol=1e-4,
        rtol=0,
    )


@pytest.mark.parametrize("d_model", [4, 8, 512])
def test_sinusoidal_table_matches_the_formula_everywhere(d_model):
    pe = sinusoidal_table(50, d_model)
    for pos in (0, 1, 7, 49):
        for i in range(d_model // 2):
            angle = pos / 10000 ** (2 * i / d_model)
            assert pe[pos, 2 * i].item() == pytest.approx(math.sin(angle), abs=1e-6)
            assert pe[pos, 2 * i + 1].item() == pytest.approx(math.cos(angle), abs=1e-6)
