"""Attention for the RNN decoder: Bahdanau's additive and Luong's multiplicative scores.

The decoder looks back at every source annotation h_j and weighs it by how well it matches the
decoder's state (the notes' "RNN attention", Bahdanau et al. 2015, eqs. 5-6):

    e_ij = a(s, h_j)                       the alignment score
    α_ij = exp(e_ij) / Σ_k exp(e_ik)       a softmax over the source words
    c_i  = Σ_j α_ij h_j                    the context vector for target word i

    additive (Bahdanau §3.1, A.1.2):       a(s, h_j) = v_aᵀ tanh(W_a s + U_a h_j)
    multiplicative (Luong et al. 2015, §3.1, "general"):  a(s, h_j) = sᵀ W_a h_j

The Transformer's scaled dot-product attention is the multiplicative score with the query and
key projected first and divided by √d_k (Vaswani et al. §3.2.1 compares the two). Padding is
masked as everywhere else: ``src_mask`` comes from ``masks.padding_mask`` (True = may attend).

U_a h_j (additive) and W_a h_j (multiplicative) do not depend on the decoder, so each source's
keys are projected once (``project_keys``) and kept in the decoder's state, as the Transformer
keeps its encoder-decoder keys in the key/value cache.

Shapes: B batch, T target positions (queries), S source length, Dq query (decoder state) width,
Dv annotation width (2H), A attention width.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn


def attend(scores: Tensor, src_mask: Tensor, values: Tensor) -> tuple[Tensor, Tensor]:
    """α = softmax(e) over the real source words, c = Σ_j α_j h_j.

    Args:
        scores: alignment scores e (B, T, S).
        src_mask: (B, 1, 1, S), True for real source words (every row has one).
        values: the annotations h (B, S, Dv).
    Shape:
        returns contexts c (B, T, Dv) and weights α (B, T, S): each row sums to 1 over the real
        words and is exactly 0 on padding.
    """
    mask = src_mask.squeeze(1)  # (B, 1, S): the same source words for every query
    weights = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)  # (B, T, S)
    return weights @ values, weights  # (B, T, Dv)


class AdditiveAttention(nn.Module):
    """Bahdanau's score: e_ij = v_aᵀ tanh(W_a s_{i-1} + U_a h_j), a one-hidden-layer network."""

    def __init__(self, query_size: int, value_size: int, attention_size: int) -> None:
        super().__init__()
        self.query = nn.Linear(query_size, attention_size, bias=False)  # W_a
        self.key = nn.Linear(value_size, attention_size)  # U_a (its bias is the layer's)
        self.score = nn.Linear(attention_size, 1, bias=False)  # v_a

    def project_keys(self, annotations: Tensor) -> Tensor:
        """U_a h_j for every source word, once per sentence: (B, S, Dv) -> (B, S, A)."""
        return self.key(annotations)

    def forward(
        self, query: Tensor, keys: Tensor, values: Tensor, src_mask: Tensor
    ) -> tuple[Tensor, Tensor]:
        """Args:
            query: decoder states s (B, T, Dq); keys: ``project_keys`` (B, S, A);
            values: annotations h (B, S, Dv); src_mask: (B, 1, 1, S).
        Shape:
            returns contexts (B, T, Dv) and weights (B, T, S).
        """
        hidden = torch.tanh(self.query(query)[:, :, None] + keys[:, None])  # (B, T, S, A)
        scores = self.score(hidden).squeeze(-1)  # (B, T, S)
        return attend(scores, src_mask, values)


class MultiplicativeAttention(nn.Module):
    """Luong's "general" score: e_ij = s_iᵀ W_a h_j, one bilinear form."""

    def __init__(self, query_size: int, value_size: int) -> None:
        super().__init__()
        self.key = nn.Linear(value_size, query_size, bias=False)  # W_a

    def project_keys(self, annotations: Tensor) -> Tensor:
        """W_a h_j for every source word, once per sentence: (B, S, Dv) -> (B, S, Dq)."""
        return self.key(annotations)

    def forward(
        self, query: Tensor, keys: Tensor, values: Tensor, src_mask: Tensor
    ) -> tuple[Tensor, Tensor]:
        """Args and shapes as ``AdditiveAttention.forward``, with keys (B, S, Dq)."""
        scores = query @ keys.transpose(1, 2)  # (B, T, S)
        return attend(scores, src_mask, values)
