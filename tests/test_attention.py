"""Scaled dot-product and multi-head attention: fused path = reference path, masks, edge cases."""

import math

import pytest
import torch

import transformer.model.attention as attention_module
from transformer.model.attention import (
    Blocked,
    MultiHeadAttention,
    attention_fused,
    attention_reference,
    attention_step,
    scaled_dot_product_attention,
)
from transformer.model.masks import combined_mask, look_ahead_mask, padding_mask


def qkv(B=2, H=3, Tq=5, Tk=6, Dh=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (
        torch.randn(B, H, Tq, Dh, generator=g),
        torch.randn(B, H, Tk, Dh, generator=g),
        torch.randn(B, H, Tk, Dh, generator=g),
    )


def test_reference_is_softmax_of_scaled_scores_times_values():
    q, k, v = qkv()
    out, weights = attention_reference(q, k, v)
    # Written out per query with plain loops over keys.
    b, h, i = 1, 2, 3
    scores = [float(q[b, h, i] @ k[b, h, j]) / math.sqrt(8) for j in range(6)]
    exps = [math.exp(s) for s in scores]
    expected_w = torch.tensor([e / sum(exps) for e in exps])
    torch.testing.assert_close(weights[b, h, i], expected_w, atol=1e-6, rtol=0)
    torch.testing.assert_close(out[b, h, i], expected_w @ v[b, h], atol=1e-6, rtol=0)


@pytest.mark.parametrize(
    "mask",
    [
        None,
        padding_mask(torch.tensor([[5, 6, 7, 8, 0, 0], [5, 6, 7, 8, 9, 10]])),
        look_ahead_mask(5, past=1),
    ],
    ids=["no mask", "padding", "look-ahead with past"],
)
def test_fused_equals_reference(mask):
    q, k, v = qkv()
    ref, _ = attention_reference(q, k, v, mask)
    fused = attention_fused(q, k, v, mask)
    assert (ref - fused).abs().max() < 1e-6


def test_masked_keys_get_zero_weight():
    q, k, v = qkv()
    mask = padding_mask(torch.tensor([[5, 6, 7, 8, 0, 0], [5, 6, 0, 0, 0, 0]]))
    _, weights = attention_reference(q, k, v, mask)
    assert weights[0, :, :, 4:].abs().max() == 0
    assert weights[1, :, :, 2:].abs().max() == 0
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, 3, 5))


def test_fully_masked_row_is_finite_in_both_paths_with_finite_gradients():
    q, k, v = (t.requires_grad_() for t in qkv(B=1, H=1, Tq=3, Tk=3))
    mask = torch.tensor([[True, True, False], [False, False, False], [True, False, False]])
    for path in (
        lambda: attention_reference(q, k, v, mask)[0],
        lambda: attention_fused(q, k, v, mask),
    ):
        out = path()
        assert torch.isfinite(out).all()
        assert out[0, 0, 1].abs().max() == 0  # the query with nothing to attend to outputs 0
        (grad_q,) = torch.autograd.grad(out.sum(), q)
        assert torch.isfinite(grad_q).all()
    _, weights = attention_reference(q, k, v, mask)
    assert weights[0, 0, 1].abs().max() == 0


def test_need_weights_switches_to_reference_path():
    q, k, v = qkv()
    out_w, weights = scaled_dot_product_attention(q, k, v, need_weights=True)
    out, none = scaled_dot_product_attention(q, k, v)
    assert none is None and weights.shape == (2, 3, 5, 6)
    assert (out_w - out).abs().max() < 1e-6


def test_one_query_per_row_on_a_cpu_takes_the_matmul_path_with_the_same_numbers(monkeypatch):
    q, k, v = qkv(Tq=1)
    mask = padding_mask(torch.tensor([[5, 6, 7, 8, 0, 0], [5, 6, 7, 8, 9, 10]]))
    fused = attention_fused(q, k, v, mask)
    calls = []
    monkeypatch.setattr(attention_module, "attention_fused", lambda *a: calls.append(a))
    out, weights = scaled_dot_product_attention(q, k, v, mask)
    assert calls == [] and weights is None  # the reference path ran (a decoding step)
    assert (out - fused).abs().max() < 1e-6
    scaled_dot_product_attention(*qkv(Tq=2), mask)  # two queries: the fused kernel
    assert len(calls) == 1


@pytest.mark.parametrize("Tq", [1, 4])
@pytest.mark.parametrize("Tk", [1, 4, 8, 12, 13, 15, 16, 17, 40])
def test_a_decoding_steps_attention_is_the_references_on_both_sides_of_each_threshold(
    Tk, Tq, monkeypatch
):
    """``attention_step`` multiplies and sums weights·V where ``bmm`` would not use BLAS (one
    query, Tk · Dh < 400: Tk <= 12 at Dh 32) and pads rows of fewer than 16 keys for the
    softmax: the reference's numbers to float32 rounding, with a padded row and a row
    with nothing to attend to (zeros), and with no mask; its weights are the reference's too."""
    B, H, Dh = 24, 4, 32
    q, k, v = qkv(B=B, H=H, Tq=Tq, Tk=Tk, Dh=Dh, seed=Tk)
    mask = torch.ones(B, 1, 1, Tk, dtype=torch.bool)
    mask[1, ..., (Tk + 1) // 2 :] = False  # a shorter source
    mask[2] = False  # an empty one
    products = []
    matmul = torch.matmul
    monkeypatch.setattr(torch, "matmul", lambda *a: products.append(a) or matmul(*a))
    for m in (mask, None):
        expected, expected_weights = attention_reference(q, k, v, m)
        products.clear()
        got, weights = attention_step(q, k.contiguous(), v.contiguous(), m)
        assert got.shape == (B, H, Tq, Dh)
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(weights, expected_weights, rtol=1e-5, atol=1e-6)
        small = Tq == 1 and Tk * Dh < 400
        assert len(products) == (1 if small else 2)
    out, weights = attention_step(q, k, v, mask)
    assert out[2].abs().max() == 0 and weights[2].abs().max() == 0


@pytest.mark.parametrize("Tk", [4, 13, 20])
def test_blocked_keys_made_once_give_the_masks_numbers(Tk):
    """A ``Blocked`` made once for several attentions: the same bits as the mask it comes
    from; where no query has every key blocked its blocked weights are not zeroed again (they
    are exactly 0 after the softmax), and with an empty source they are (zeros)."""
    q, k, v = qkv(B=6, H=2, Tq=1, Tk=Tk, Dh=16, seed=Tk)
    mask = torch.ones(6, 1, 1, Tk, dtype=torch.bool)
    mask[1, ..., Tk // 2 :] = False  # a shorter source
    blocked = Blocked.of(mask)
    assert not blocked.some_query_has_none
    assert torch.equal(attention_step(q, k, v, blocked)[0], attention_step(q, k, v, mask)[0])
    expected, _ = attention_reference(q, k, v, mask)
    torch.testing.assert_close(attention_step(q, k, v, blocked)[0], expected, rtol=1e-5, atol=1e-6)
    mask[4] = False  # an empty source
    blocked = Blocked.of(mask)
    assert blocked.some_query_has_none
    assert torch.equal(attention_step(q, k, v, blocked)[0], attention_step(q, k, v, mask)[0])
    assert attention_step(q, k, v, blocked)[0][4].abs().max() == 0


@pytest.mark.parametrize("Tk", [4, 12, 13, 20])
def test_a_decoding_steps_attention_does_not_depend_on_the_other_rows(Tk):
    """Which way ``attention_step`` computes depends on the keys only: each row alone gives
    the bits it gives among 23 others (a sentence's translation does not depend on its
    batch; tests/test_glossary.py compares whole beam searches bit for bit)."""
    q, k, v = qkv(B=24, H=4, Tq=1, Tk=Tk, Dh=32, seed=Tk)
    mask = torch.ones(24, 1, 1, Tk, dtype=torch.bool)
    mask[1, ..., Tk // 2 :] = False
    together, _ = attention_step(q, k, v, mask)
    alone = [attention_step(q[i : i + 1], k[i : i + 1], v[i : i + 1], mask[i : i + 1])[0]
             for i in range(24)]  # fmt: skip
    assert torch.equal(together, torch.cat(alone))


def test_a_short_softmax_row_is_padded_only_for_the_kernel():
    scores = torch.randn(48, 3, 13)
    scores[0, 0, 4:] = torch.finfo(scores.dtype).min  # blocked keys, as attention_step masks
    weights = attention_module._softmax(scores)
    assert weights.shape == scores.shape
    torch.testing.assert_close(weights, scores.softmax(dim=-1), rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(weights.sum(-1), torch.ones(48, 3))
    assert weights[0, 0, 4:].abs().max() == 0
    wide = torch.randn(2, 16)
    assert torch.equal(attention_module._softmax(wide), wide.softmax(dim=-1))


def test_multi_head_is_concatenation_of_single_heads():
    torch.manual_seed(0)
    D, H = 12, 3
    mha = MultiHeadAttention(D, H).eval()
    x = torch.randn(2, 4, D)
    mem = torch.randn(2, 5, D)
    out, weights = mha(x, mem, mem, need_weights=True)
    assert out.shape == (2, 4, D) and weights.shape == (2, H, 4, 5)
    # head_i = Attention(x W_Qi, mem W_Ki, mem W_Vi) with W_Qi the i-th block of Dh output rows.
    Dh = D // H
    heads = []
    for i in range(H):
        rows = slice(i * Dh, (i + 1) * Dh)
        q = x @ mha.w_q.weight[rows].T + mha.w_q.bias[rows]
        k = mem @ mha.w_k.weight[rows].T + mha.w_k.bias[rows]
        v = mem @ mha.w_v.weight[rows].T + mha.w_v.bias[rows]
        w = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(Dh), dim=-1)
        torch.testing.assert_close(weights[:, i], w, atol=1e-6, rtol=0)
        heads.append(w @ v)
    expected = torch.cat(heads, dim=-1) @ mha.w_o.weight.T + mha.w_o.bias
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=0)


def test_multi_head_rejects_indivisible_width():
    with pytest.raises(ValueError, match="divisible"):
        MultiHeadAttention(10, 3)


def test_combined_mask_is_lookahead_and_padding():
    ids = torch.tensor([[4, 5, 0], [4, 0, 0]])
    mask = combined_mask(ids)
    assert mask.shape == (2, 1, 3, 3) and mask.dtype == torch.bool
    for b in range(2):
        for i in range(3):
            for j in range(3):
                assert mask[b, 0, i, j].item() == (j <= i and ids[b, j].item() != 0)


def test_look_ahead_with_past_aligns_with_full_mask():
    full = look_ahead_mask(6)[0, 0]
    for past in range(6):
        step = look_ahead_mask(6 - past, past=past)[0, 0]
        assert torch.equal(step, full[past:])
