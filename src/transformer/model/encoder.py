"""The encoder: N identical layers of self-attention and feed-forward, each with add & norm.

Post-norm (the paper, the default):  x = LayerNorm(x + Sublayer(x))
Pre-norm (``norm_first``):            x = x + Sublayer(LayerNorm(x)), with a final LayerNorm
                                      after the stack.

Shapes: B batch, S source length, D model width, H heads.
"""

from __future__ import annotations

from torch import Tensor, nn

from ..config import ModelConfig
from .attention import MultiHeadAttention
from .layers import Dropout, FeedForward, LayerNorm


class EncoderLayer(nn.Module):
    """Multi-head self-attention, add & norm, feed-forward, add & norm."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.norm_first = config.norm_first
        self.self_attn = MultiHeadAttention(
            config.d_model, config.n_heads, config.attention_dropout
        )
        self.norm1 = LayerNorm(config.d_model, config.layer_norm_eps)
        self.feed_forward = FeedForward(
            config.d_model, config.d_ff, config.activation_dropout, config.activation
        )
        self.norm2 = LayerNorm(config.d_model, config.layer_norm_eps)
        self.dropout = Dropout(config.dropout)

    def forward(
        self, x: Tensor, src_mask: Tensor | None, need_weights: bool = False
    ) -> tuple[Tensor, Tensor | None]:
        """Args:
            x: (B, S, D); src_mask: padding mask (B, 1, 1, S), True = real token.
        Shape:
            returns x (B, S, D) and, if ``need_weights``, self-attention weights (B, H, S, S).
        """
        if self.norm_first:
            attended, weights = self._self_attention(self.norm1(x), src_mask, need_weights)
            x = x + attended
            x = x + self._feed_forward(self.norm2(x))
        else:
            attended, weights = self._self_attention(x, src_mask, need_weights)
            x = self.norm1(x + attended)
            x = self.norm2(x + self._feed_forward(x))
        return x, weights

    def _self_attention(
        self, x: Tensor, mask: Tensor | None, need_weights: bool
    ) -> tuple[Tensor, Tensor | None]:
        """Self-attention (queries, keys and values all from x), then dropout."""
        attended, weights = self.self_attn(x, x, x, mask, need_weights)
        return self.dropout(attended), weights

    def _feed_forward(self, x: Tensor) -> Tensor:
        """Feed-forward, then dropout."""
        return self.dropout(self.feed_forward(x))


class Encoder(nn.Module):
    """A stack of N encoder layers (N = 6 in the paper)."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.layers = nn.ModuleList(EncoderLayer(config) for _ in range(config.n_encoder_layers))
        # Pre-norm leaves the residual stream un-normalised, so the stack ends with one more norm.
        self.final_norm = (
            LayerNorm(config.d_model, config.layer_norm_eps) if config.norm_first else nn.Identity()
        )

    def forward(
        self, x: Tensor, src_mask: Tensor | None, need_weights: bool = False
    ) -> tuple[Tensor, list[Tensor] | None]:
        """Args:
            x: embedded source (B, S, D); src_mask: (B, 1, 1, S).
        Shape:
            returns the encoder output ("memory") (B, S, D) and, if ``need_weights``, a list of
            N self-attention weight tensors (B, H, S, S).
        """
        all_weights: list[Tensor] = []
        for layer in self.layers:
            x, weights = layer(x, src_mask, need_weights)
            if weights is not None:
                all_weights.append(weights)
        return self.final_norm(x), (all_weights if need_weights else None)
