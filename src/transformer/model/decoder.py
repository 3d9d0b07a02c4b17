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

from torch import Tensor, nn

from ..config import ModelConfig
from .attention import MultiHeadAttention
from .cache import DecoderCache, FixedSlots, FixedStep, LayerCache
from .layers import Dropout, FeedForward, LayerNorm


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
            if cache.cross_keys is None:
                assert isinstance(cache, LayerCache)  # a compiled step's are set beforehand
                cache.set_cross(*self.cross_attn.project_kv(memory, memory))  # (B, H, S, Dh)
            keys, values = cache.cross_keys, cache.cross_values
            assert keys is not None and values is not None
        rows, T, D = x.shape
        beams = rows // keys.size(0)  # K rows of x per sentence; 1 without beams to fold
        folded = x.reshape(rows // beams, beams * T, D)  # (N, K·T, D)
        step = cache is not None and beams > 1  # each beam's new position: K queries a row
        attended, weights = self.cross_attn.attend(folded, keys, values, mask, need_weights, step)
        if weights is not None and beams > 1:  # (N, H, K·T, S) -> (N·K, H, T, S)
            weights = weights.unflatten(2, (beams, T)).transpose(1, 2).flatten(0, 1)
        return self.dropout(attended.reshape(rows, T, D)), weights

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
        all_weights: list[DecoderAttention] = []
        for i, layer in enumerate(self.layers):
            layer_cache = cache.layers[i] if cache is not None else None
            x, weights = layer(x, memory, tgt_mask, memory_mask, layer_cache, need_weights)
            if weights is not None:
                all_weights.append(weights)
        return self.final_norm(x), (all_weights if need_weights else None)
