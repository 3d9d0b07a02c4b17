"""The decoder: N layers of masked self-attention, encoder-decoder attention and feed-forward.

Masked self-attention lets position t see only target positions <= t (the look-ahead mask), so
that training on a whole sentence at once matches generating it word by word. Encoder-decoder
attention takes its queries from the decoder and its keys and values from the encoder output.

With a ``DecoderCache`` the decoder runs incrementally: x holds only the new positions, their
self-attention keys/values are appended to the cache, and the encoder-decoder keys/values are
projected on the first call only.

Shapes: B batch, T target length (new positions), t cached positions, S source length,
D model width, H heads.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from ..config import ModelConfig
from .attention import Blocked, MultiHeadAttention, attention_step
from .cache import DecoderCache, FixedSlots, FixedStep, LayerCache
from .layers import Dropout, FeedForward, LayerNorm, activated
from .linear import linear


@dataclass
class DecoderAttention:
    """Attention weights of one decoder layer."""

    self_attention: Tensor | None  # (B, H, T, t + T); None: an RNN decoder has none
    cross_attention: Tensor  # (B, H, T, S)


class DecoderLayer(nn.Module):
    """Masked self-attention, add & norm, encoder-decoder attention, add & norm, feed-forward,
    add & norm."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.norm_first = config.norm_first
        d_model, eps = config.d_model, config.layer_norm_eps
        self.self_attn = MultiHeadAttention(d_model, config.n_heads, config.attention_dropout)
        self.norm1 = LayerNorm(d_model, eps)
        self.cross_attn = MultiHeadAttention(d_model, config.n_heads, config.attention_dropout)
        self.norm2 = LayerNorm(d_model, eps)
        self.feed_forward = FeedForward(
            d_model, config.d_ff, config.activation_dropout, config.activation
        )
        self.norm3 = LayerNorm(d_model, eps)
        self.dropout = Dropout(config.dropout)

    def forward(
        self,
        x: Tensor,
        memory: Tensor,
        tgt_mask: Tensor | None,
        memory_mask: Tensor | None,
        cache: LayerCache | FixedSlots | None = None,
        need_weights: bool = False,
    ) -> tuple[Tensor, DecoderAttention | None]:
        """Args:
            x: (B, T, D) target positions; memory: encoder output (B, S, D).
            tgt_mask: look-ahead (+ padding) mask (B or 1, 1, T, t + T).
            memory_mask: source padding mask (B, 1, 1, S).
            cache: this layer's keys and values from earlier steps, updated in place.
        Shape:
            returns x (B, T, D) and, if ``need_weights``, both attention weight tensors.
        """
        if self._can_step(x, tgt_mask, cache, need_weights):
            assert isinstance(cache, LayerCache)
            B, _, D = x.shape
            return self.step(x.view(B, D), memory, memory_mask, cache)[0].view(B, 1, D), None
        if self.norm_first:
            attended, self_w = self._self_attention(self.norm1(x), tgt_mask, cache, need_weights)
            x = x + attended
            attended, cross_w = self._cross_attention(
                self.norm2(x), memory, memory_mask, cache, need_weights
            )
            x = x + attended
            x = x + self._feed_forward(self.norm3(x))
        else:
            attended, self_w = self._self_attention(x, tgt_mask, cache, need_weights)
            x = self.norm1(x + attended)
            attended, cross_w = self._cross_attention(x, memory, memory_mask, cache, need_weights)
            x = self.norm2(x + attended)
            x = self.norm3(x + self._feed_forward(x))
        weights = (
            DecoderAttention(self_w, cross_w)
            if self_w is not None and cross_w is not None
            else None
        )
        return x, weights

    def _can_step(
        self,
        x: Tensor,
        tgt_mask: Tensor | None,
        cache: LayerCache | FixedSlots | None,
        need_weights: bool,
    ) -> bool:
        """Whether ``step`` computes this call: one new position per row after a growing cache,
        in inference on a CPU without autocast, no attention weights wanted."""
        return (
            isinstance(cache, LayerCache) and x.size(1) == 1 and tgt_mask is None
            and not need_weights and not self.training and not torch.is_grad_enabled()
            and x.is_cpu and not torch.is_autocast_enabled("cpu")
        )  # fmt: skip

    def step(
        self,
        x: Tensor,
        memory: Tensor,
        memory_mask: Tensor | Blocked | None,
        cache: LayerCache,
        need_weights: bool = False,
    ) -> tuple[Tensor, Tensor | None]:
        """``forward`` for one new position per row, in inference: the same numbers in fewer
        operations. A decoding step of a few rows spends its time on the calls themselves
        more than on the arithmetic (docs/speed.md), so here the linear layers are called as
        functions, not modules; dropout (nothing in inference) is not called; the attention
        goes through ``attention_step``; and each residual sum is added into the sublayer's
        fresh output. ``forward``'s path is the reference: tests/test_decoding.py checks that
        both give the same numbers (to float32 rounding, where ``attention_step`` goes around
        a slow kernel), and the cache the same contents.

        Args:
            x: the new position of each row (B, D); memory (N, S, D), N = B or, when a
                sentence's K beams share it, B / K; memory_mask (N, 1, 1, S), or its
                ``Blocked`` complement, made once for every layer.
            cache: this layer's keys and values so far, updated in place.
            need_weights: also return the encoder-decoder attention's weights, as computed.
        Shape:
            returns (B, D) and, if ``need_weights``, the weights (B, H, 1, S).
        """
        B, D = x.shape
        attn, cross, ff = self.self_attn, self.cross_attn, self.feed_forward
        H, Dh = attn.n_heads, attn.d_head
        # masked self-attention: the new query over the cached keys and its own (no mask)
        y = self.norm1(x) if self.norm_first else x
        q = linear(y, attn.w_q).view(B, H, 1, Dh)
        keys, values = cache.append(
            linear(y, attn.w_k).view(B, H, 1, Dh),
            linear(y, attn.w_v).view(B, H, 1, Dh),
        )  # (B, H, t + 1, Dh) each
        heads = attention_step(q, keys, values)[0].view(B, D)  # (B, H, 1, Dh) -> (B, D)
        x = self._add_norm(x, linear(heads, attn.w_o), self.norm1)
        # encoder-decoder attention: a sentence's K rows are K queries over its memory
        y = self.norm2(x) if self.norm_first else x
        cross_keys, cross_values = self._cross_kv(memory, cache)  # (N, H, S, Dh) each
        N = cross_keys.size(0)
        q = linear(y, cross.w_q).view(N, B // N, H, Dh).transpose(1, 2)
        heads, weights = attention_step(q, cross_keys, cross_values, memory_mask)  # (N, H, K, ·)
        heads = heads.transpose(1, 2).reshape(B, D)
        x = self._add_norm(x, linear(heads, cross.w_o), self.norm2)
        # feed-forward
        y = self.norm3(x) if self.norm_first else x
        hidden = activated(ff.activation, linear(y, ff.linear1))  # (B, F)
        x = self._add_norm(x, linear(hidden, ff.linear2), self.norm3)
        if not need_weights:
            return x, None
        return x, weights.transpose(1, 2).reshape(B, H, 1, -1)  # (N, H, K, S) -> (B, H, 1, S)

    def _add_norm(self, x: Tensor, sublayer: Tensor, norm: LayerNorm) -> Tensor:
        """x + sublayer(x), added into the sublayer's output, then the norm (post-norm; with
        pre-norm the norm came before the sublayer)."""
        total = sublayer.add_(x)
        return total if self.norm_first else norm(total)

    def _self_attention(
        self,
        x: Tensor,
        mask: Tensor | None,
        cache: LayerCache | FixedSlots | None,
        need_weights: bool,
    ) -> tuple[Tensor, Tensor | None]:
        """Masked self-attention over the cached steps and the new ones, then dropout."""
        keys, values = self.self_attn.project_kv(x, x)  # (B, H, T, Dh) each
        if cache is not None:
            keys, values = cache.append(keys, values)  # (B, H, t + T, Dh)
        attended, weights = self.self_attn.attend(x, keys, values, mask, need_weights)
        return self.dropout(attended), weights

    def _cross_attention(
        self,
        x: Tensor,
        memory: Tensor,
        mask: Tensor | None,
        cache: LayerCache | FixedSlots | None,
        need_weights: bool,
    ) -> tuple[Tensor, Tensor | None]:
        """Encoder-decoder attention: queries from x, keys and values from memory, then dropout.

        x may hold K rows per row of memory (beam search's beams, rows n·K..n·K+K-1 for
        sentence n): the K rows' queries then go into one row, (N, K·T, D), over the sentence's
        keys and values, computed and cached once. Each query's attention is its own (the
        softmax runs over the keys of its row), so this is the same maths as K copies.
        """
        if cache is None:
            keys, values = self.cross_attn.project_kv(memory, memory)  # (B, H, S, Dh)
        else:
            keys, values = self._cross_kv(memory, cache)  # (B, H, S, Dh)
        rows, T, D = x.shape
        beams = rows // keys.size(0)  # K rows of x per sentence; 1 without beams to fold
        folded = x.reshape(rows // beams, beams * T, D)  # (N, K·T, D)
        step = cache is not None and beams > 1  # each beam's new position: K queries a row
        attended, weights = self.cross_attn.attend(folded, keys, values, mask, need_weights, step)
        if weights is not None and beams > 1:  # (N, H, K·T, S) -> (N·K, H, T, S)
            weights = weights.unflatten(2, (beams, T)).transpose(1, 2).flatten(0, 1)
        return self.dropout(attended.reshape(rows, T, D)), weights

    def _cross_kv(self, memory: Tensor, cache: LayerCache | FixedSlots) -> tuple[Tensor, Tensor]:
        """The encoder-decoder keys and values from the cache, projected from ``memory`` and
        cached at the first step: (B, H, S, Dh) each."""
        if cache.cross_keys is None:
            assert isinstance(cache, LayerCache)  # a compiled step's are set beforehand
            cache.set_cross(*self.cross_attn.project_kv(memory, memory))  # (B, H, S, Dh)
        keys, values = cache.cross_keys, cache.cross_values
        assert keys is not None and values is not None
        return keys, values

    def _feed_forward(self, x: Tensor) -> Tensor:
        """Feed-forward, then dropout."""
        return self.dropout(self.feed_forward(x))


class Decoder(nn.Module):
    """A stack of N decoder layers (N = 6 in the paper)."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.layers = nn.ModuleList(DecoderLayer(config) for _ in range(config.n_decoder_layers))
        self.final_norm = (
            LayerNorm(config.d_model, config.layer_norm_eps) if config.norm_first else nn.Identity()
        )

    def forward(
        self,
        x: Tensor,
        memory: Tensor,
        tgt_mask: Tensor | None,
        memory_mask: Tensor | None,
        cache: DecoderCache | FixedStep | None = None,
        need_weights: bool = False,
    ) -> tuple[Tensor, list[DecoderAttention] | None]:
        """Args:
            x: embedded target positions (B, T, D); memory (B, S, D); masks as in DecoderLayer.
            cache: one LayerCache per layer, updated in place.
        Shape:
            returns hidden states (B, T, D) and, if ``need_weights``, a DecoderAttention per layer.
        """
        if self.can_step(x, tgt_mask, cache, need_weights):
            return self.steps(x, memory, memory_mask, cache)[0], None
        all_weights: list[DecoderAttention] = []
        for i, layer in enumerate(self.layers):
            layer_cache = cache.layers[i] if cache is not None else None
            x, weights = layer(x, memory, tgt_mask, memory_mask, layer_cache, need_weights)
            if weights is not None:
                all_weights.append(weights)
        return self.final_norm(x), (all_weights if need_weights else None)

    def can_step(
        self,
        x: Tensor,
        tgt_mask: Tensor | None,
        cache: DecoderCache | FixedStep | None,
        need_weights: bool = False,
    ) -> bool:
        """Whether ``steps`` computes this call (``DecoderLayer._can_step``)."""
        return (
            isinstance(cache, DecoderCache) and len(self.layers) > 0
            and self.layers[0]._can_step(x, tgt_mask, cache.layers[0], need_weights)
        )  # fmt: skip

    def steps(
        self,
        x: Tensor,
        memory: Tensor,
        memory_mask: Tensor | None,
        cache: DecoderCache | FixedStep | None,
        weights_of: int | None = None,
    ) -> tuple[Tensor, Tensor | None]:
        """One new position per row (``can_step``): the layers' ``step`` in turn, each row a
        (D,) vector; with ``weights_of``, that layer's encoder-decoder attention weights too,
        and no other layer's (what a search keeps for word alignments).

        Shape:
            x (B, 1, D) -> (B, 1, D) and, if ``weights_of``, weights (B, H, 1, S).
        """
        assert isinstance(cache, DecoderCache)
        B, _, D = x.shape
        rows = x.view(B, D)
        blocked = None if memory_mask is None else cache.blocked(memory_mask)
        kept = None
        for i, (layer, layer_cache) in enumerate(zip(self.layers, cache.layers, strict=True)):
            rows, weights = layer.step(rows, memory, blocked, layer_cache, i == weights_of)
            kept = kept if weights is None else weights
        return self.final_norm(rows).view(B, 1, D), kept
