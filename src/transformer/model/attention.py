"""Scaled dot-product attention (§3.2.1) and multi-head attention (§3.2.2).

The maths is a pure function with two paths that give the same numbers:
- ``attention_reference``: softmax(Q·Kᵀ/√d_k)·V written out, returning the attention weights;
- ``attention_fused``: ``torch.nn.functional.scaled_dot_product_attention``, used for speed.

Masks follow ``masks.py``: boolean, True = may attend, broadcastable to (B, H, Tq, Tk).

Shapes: B batch, Tq query length, Tk key length, H heads, D model width, Dh head width (D / H).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .linear import Linear


def attention_scores(q: Tensor, k: Tensor) -> Tensor:
    """Q·Kᵀ / √d_k: how well each query matches each key, before the mask and the softmax.

    Shape:
        q (B, H, Tq, Dh), k (B, H, Tk, Dh) -> (B, H, Tq, Tk).
    """
    return q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))  # (B, H, Tq, Tk)


def attention_reference(
    q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None, dropout_p: float = 0.0
) -> tuple[Tensor, Tensor]:
    """softmax(Q·Kᵀ / √d_k) · V, step by step, as in the notes.

    Args:
        q: queries (B, H, Tq, Dh); k: keys (B, H, Tk, Dh); v: values (B, H, Tk, Dh).
        mask: boolean, True = may attend, broadcastable to (B, H, Tq, Tk).
        dropout_p: dropout on the attention weights (pass 0 in eval mode).
    Shape:
        returns output (B, H, Tq, Dh) and weights (B, H, Tq, Tk); each weight row sums to 1,
        except a fully masked row (a query with nothing to attend to), which is all zeros.
    """
    scores = attention_scores(q, k)  # (B, H, Tq, Tk)
    if mask is not None:
        # Blocked keys get the lowest finite score rather than -inf: their weight is exactly 0
        # all the same (the exponential underflows), except in a row whose keys are all
        # blocked, which becomes uniform instead of softmax(-inf, ..., -inf) = NaN. Multiplying
        # by the mask then zeroes that row: its output is 0, as in the fused path.
        scores = torch.where(mask, scores, torch.finfo(scores.dtype).min)
    weights = scores.softmax(dim=-1)  # (B, H, Tq, Tk)
    if mask is not None:
        weights = weights * mask
    if dropout_p > 0.0:
        weights = F.dropout(weights, p=dropout_p)
    return weights @ v, weights  # (B, H, Tq, Dh), (B, H, Tq, Tk)


def attention_fused(
    q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None, dropout_p: float = 0.0
) -> Tensor:
    """The same maths through PyTorch's fused kernel; no weights come back.

    PyTorch >= 2.5 returns zeros for a fully masked row, like ``attention_reference``.
    """
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p)


# Two thresholds of PyTorch's CPU kernels that a decoding step falls under (measured on the
# project's 2-core CPU, one thread, 256 rows of one query: benchmarks/attention_kernels.py):
# - ``bmm`` multiplies in a scalar loop, without BLAS, when a product's contraction · rows ·
#   columns is below 400: weights·V over 12 keys took 110 µs, over 13 keys 26 µs;
# - ``softmax`` vectorises rows of 16 or more: 13 columns took 59 µs, 16 columns 7 µs.
# The way around each depends on the number of keys only, never on the number of rows, so that
# a sentence's numbers do not depend on what else is in its batch.
SMALL_PRODUCT = 400
SOFTMAX_WIDTH = 16


@dataclass(frozen=True)
class Blocked:
    """A mask's complement, True = may not attend, as ``attention_step`` uses it: made once for
    the layers and steps that share the mask (a decoding step's encoder-decoder attention),
    where each attention made it anew, with whether some query has every key blocked (an empty
    source), whose weights must then be zeroed. (B, 1, 1, Tk)."""

    keys: Tensor
    some_query_has_none: bool

    @classmethod
    def of(cls, mask: Tensor) -> Blocked:
        """From a mask (B, 1, 1, Tk), True = may attend."""
        blocked = mask.logical_not()  # (B, 1, 1, Tk)
        return cls(blocked, bool(blocked.all(dim=-1).any()))


def attention_step(
    q: Tensor, k: Tensor, v: Tensor, mask: Tensor | Blocked | None = None
) -> tuple[Tensor, Tensor]:
    """``attention_reference``'s maths for a decoding step, in fewer and faster operations:
    the heads of every row as one batch of products, the scores scaled and masked in place,
    the blocked weights zeroed in place (zeros for a query with nothing to attend to, an empty
    source's); the weights come back too, as computed. Where weights·V is too small for
    ``bmm`` to use BLAS (one query over a few keys: the first steps of self-attention, a short
    source), it is multiplied and summed instead (for Q·Kᵀ that was slower than ``bmm``'s
    loop); rows of fewer than 16 keys go through ``softmax`` padded to 16 (``_softmax``).
    tests/test_attention.py checks it against the reference on both sides of each threshold.

    Shape:
        q (B, H, Tq, Dh), k and v (B, H, Tk, Dh) (rows and heads mergeable into one dim, as
        a cache's buffer and a linear layer's output are), mask (or ``Blocked``)
        broadcastable to (B, 1, 1, Tk) -> output (B, H, Tq, Dh), weights (B, H, Tq, Tk).
    """
    Tq, Dh = q.shape[-2:]
    # (B, H) stay two dims: ``matmul`` folds them into bmm's one batch dim in C++, where
    # flattening them here took three calls more per attention, each one Python lets go of its
    # global lock for and takes back (docs/speed.md, "Two batches at once")
    scores = torch.matmul(q, k.transpose(-2, -1)).div_(math.sqrt(Dh))  # (B, H, Tq, Tk)
    Tk = scores.size(-1)
    if mask is None:
        weights = _softmax(scores)  # (B, H, Tq, Tk)
    else:
        blocked = mask if isinstance(mask, Blocked) else Blocked(mask.logical_not(), True)
        scores = scores.masked_fill_(blocked.keys, torch.finfo(scores.dtype).min)
        # a blocked key's weight is exp(min − max) = 0 already, unless every key is blocked
        weights = _softmax(scores)  # (B, H, Tq, Tk)
        if blocked.some_query_has_none:
            weights = weights.masked_fill_(blocked.keys, 0.0)
    # one query over few keys, where bmm would take its scalar loop: multiplied and summed
    if Tq == 1 and Tk * Dh < SMALL_PRODUCT:
        return (weights.transpose(-2, -1) * v).sum(dim=-2, keepdim=True), weights  # (B, H, 1, Dh)
    return torch.matmul(weights, v), weights  # (B, H, Tq, Dh)


def _softmax(scores: Tensor) -> Tensor:
    """softmax over the last dim; on a CPU, rows shorter than ``SOFTMAX_WIDTH`` are padded to
    it with −inf (weight exactly 0) so that the kernel vectorises them, and a view of the real
    columns comes back."""
    width = scores.size(-1)
    if width >= SOFTMAX_WIDTH or not scores.is_cpu:
        return scores.softmax(dim=-1)
    padded = F.pad(scores, (0, SOFTMAX_WIDTH - width), value=float("-inf"))
    return padded.softmax(dim=-1)[..., :width]


def scaled_dot_product_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Tensor | None = None,
    dropout_p: float = 0.0,
    need_weights: bool = False,
    step: bool = False,
) -> tuple[Tensor, Tensor | None]:
    """Attention(Q, K, V): the fused path, or the reference path when the weights are wanted.

    Also the reference path for a decoding step on a CPU (one query per row, or ``step``: the
    new position of each of a sentence's K beams, folded into one row by decoder.py): there its
    two small matrix products take a third to a half of the fused kernel's time, whose
    blocking is made for many queries (measured with beam 4 on the ``small`` preset: 2.7 ms
    -> 0.9 ms a call; README, "Fast translation on a CPU"; 4 queries per row, 64 rows of 4
    heads, 30 keys: 1.3 ms against 1.5 ms, 1 thread).
    """
    one_step_on_cpu = (q.size(-2) == 1 or step) and q.device.type == "cpu" and dropout_p == 0.0
    if need_weights or one_step_on_cpu:
        out, weights = attention_reference(q, k, v, mask, dropout_p)
        return out, weights if need_weights else None
    return attention_fused(q, k, v, mask, dropout_p), None


class MultiHeadAttention(nn.Module):
    """MultiHead(Q, K, V) = Concat(head_1, ..., head_h) · W_O,
    where head_i = Attention(Q·W_Qi, K·W_Ki, V·W_Vi).

    The h heads of width d_k = d_model / h are computed at once: one (D, D) projection is the
    h per-head (D, Dh) matrices side by side. Serves as self-attention (query = key = value = x)
    and as encoder-decoder attention (query from the decoder, key = value = encoder output).
    ``project_kv`` and ``attend`` are separate so that a decoder can cache keys and values.
    """

    def __init__(self, d_model: int, n_heads: int, dropout: float = 0.0) -> None:
        super().__init__()
        if d_model % n_heads:
            raise ValueError(f"d_model ({d_model}) must be divisible by n_heads ({n_heads})")
        self.n_heads = n_heads
        self.d_head = d_model // n_heads
        self.dropout = dropout
        self.w_q = Linear(d_model, d_model)
        self.w_k = Linear(d_model, d_model)
        self.w_v = Linear(d_model, d_model)
        self.w_o = Linear(d_model, d_model)

    def _split_heads(self, x: Tensor) -> Tensor:
        """(B, T, D) -> (B, H, T, Dh)."""
        B, T, _ = x.shape
        return x.view(B, T, self.n_heads, self.d_head).transpose(1, 2)  # (B, H, T, Dh)

    def project_kv(self, key: Tensor, value: Tensor) -> tuple[Tensor, Tensor]:
        """Keys and values split into heads: (B, Tk, D) -> two (B, H, Tk, Dh)."""
        return self._split_heads(self.w_k(key)), self._split_heads(self.w_v(value))

    def attend(
        self,
        query: Tensor,
        k: Tensor,
        v: Tensor,
        mask: Tensor | None = None,
        need_weights: bool = False,
        step: bool = False,
    ) -> tuple[Tensor, Tensor | None]:
        """Attention of projected queries over already projected keys and values; ``step``:
        the queries are a decoding step's (``scaled_dot_product_attention``).

        Shape:
            query (B, Tq, D), k and v (B, H, Tk, Dh) -> output (B, Tq, D), weights (B, H, Tq, Tk).
        """
        B, Tq, D = query.shape
        q = self._split_heads(self.w_q(query))  # (B, H, Tq, Dh)
        dropout_p = self.dropout if self.training else 0.0
        heads, weights = scaled_dot_product_attention(q, k, v, mask, dropout_p, need_weights, step)
        concat = heads.transpose(1, 2).reshape(B, Tq, D)  # (B, Tq, H·Dh) = (B, Tq, D)
        return self.w_o(concat), weights

    def forward(
        self,
        query: Tensor,
        key: Tensor,
        value: Tensor,
        mask: Tensor | None = None,
        need_weights: bool = False,
    ) -> tuple[Tensor, Tensor | None]:
        """Args:
            query (B, Tq, D), key and value (B, Tk, D); mask broadcastable to (B, H, Tq, Tk).
        Shape:
            returns output (B, Tq, D) and, if ``need_weights``, weights (B, H, Tq, Tk).
        """
        k, v = self.project_kv(key, value)
        return self.attend(query, k, v, mask, need_weights)


def identity_attention(d_model: int, n_heads: int = 1) -> MultiHeadAttention:
    """Multi-head attention with W_Q = W_K = W_V = W_O = I and zero biases (the notes' examples)."""
    mha = MultiHeadAttention(d_model, n_heads)
    with torch.no_grad():
        for linear in (mha.w_q, mha.w_k, mha.w_v, mha.w_o):
            linear.weight.copy_(torch.eye(d_model))
            linear.bias.zero_()
    return mha.eval()
