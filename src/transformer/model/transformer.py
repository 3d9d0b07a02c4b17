"""The Transformer: embeddings, encoder, decoder, and the final linear layer + softmax (Figure 1).

    source ids ──► Embeddings ──► Encoder ──► memory ─────────────┐
    target ids ──► Embeddings ──► Decoder (masked self-attn, enc-dec attn) ──► Linear ──► softmax
    (shifted right: <s> y1 y2 ...)

Shapes: B batch, S source length, T target length, D model width, V target vocabulary.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from ..config import ModelConfig
from ..vocab import PAD_ID
from .cache import DecoderCache
from .decoder import Decoder, DecoderAttention
from .embeddings import Embeddings, TokenEmbedding
from .encoder import Encoder
from .masks import combined_mask, look_ahead_mask, padding_mask


@dataclass
class AttentionMaps:
    """Every attention weight of one forward pass, layer by layer."""

    encoder: list[Tensor]  # N x (B, H, S, S)
    decoder: list[DecoderAttention]  # N x (self (B, H, T, T), cross (B, H, T, S))


class Transformer(nn.Module):
    """The encoder-decoder Transformer of "Attention Is All You Need"."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.config = config
        src_tokens = TokenEmbedding(config.src_vocab_size, config.d_model)
        tgt_tokens = (
            src_tokens
            if config.share_embeddings
            else TokenEmbedding(config.tgt_vocab_size, config.d_model)
        )
        inputs = (config.positional, config.max_positions, config.dropout, config.positional_layout)
        self.src_embed = Embeddings(src_tokens, *inputs)
        self.tgt_embed = Embeddings(tgt_tokens, *inputs)
        self.encoder = Encoder(config)
        self.decoder = Decoder(config)
        # The final linear layer: one score (logit) per target-vocabulary word (§3.4); the paper
        # has no bias, Marian adds one (final_logits_bias, ModelConfig.output_bias).
        self.output = nn.Linear(config.d_model, config.tgt_vocab_size, bias=config.output_bias)
        self._init_linear_weights()
        if config.tie_output:
            self.output.weight = tgt_tokens.weight

    def _init_linear_weights(self) -> None:
        """Xavier-uniform weights, zero biases for every linear layer (as torch.nn.Transformer)."""
        for module in self.modules():
            if isinstance(module, nn.Linear):
                nn.init.xavier_uniform_(module.weight)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)

    def encode(self, src_ids: Tensor) -> tuple[Tensor, Tensor]:
        """Runs the encoder.

        Args:
            src_ids: source token ids (B, S), padded with PAD_ID.
        Shape:
            returns memory (B, S, D) and the source padding mask (B, 1, 1, S).
        """
        src_mask = padding_mask(src_ids, PAD_ID)  # (B, 1, 1, S)
        memory, _ = self.encoder(self.src_embed(src_ids), src_mask)
        return memory, src_mask

    def decode(
        self,
        tgt_ids: Tensor,
        memory: Tensor,
        src_mask: Tensor,
        cache: DecoderCache | None = None,
    ) -> Tensor:
        """Runs the decoder and the final linear layer.

        Args:
            tgt_ids: decoder input ids (B, T), starting with BOS. With a cache: only the new
                positions, which must not be padding (generation never pads).
            memory, src_mask: from ``encode``.
            cache: keys and values of earlier steps; updated in place.
        Shape:
            returns logits (B, T, V).
        """
        hidden, _ = self._decode_hidden(tgt_ids, memory, src_mask, cache, need_weights=False)
        return self.output(hidden)  # (B, T, V)

    def _decode_hidden(
        self,
        tgt_ids: Tensor,
        memory: Tensor,
        src_mask: Tensor,
        cache: DecoderCache | None,
        need_weights: bool,
    ) -> tuple[Tensor, list[DecoderAttention] | None]:
        """Decoder hidden states (B, T, D) with the right self-attention mask."""
        past = cache.length if cache is not None else 0
        if cache is None:
            tgt_mask = combined_mask(tgt_ids, PAD_ID)  # (B, 1, T, T)
        elif tgt_ids.size(1) == 1:  # one new position: it may see every cached one, no mask
            tgt_mask = None
        else:
            tgt_mask = look_ahead_mask(tgt_ids.size(1), past, tgt_ids.device)  # (1, 1, T, t + T)
        x = self.tgt_embed(tgt_ids, offset=past)  # (B, T, D)
        return self.decoder(x, memory, tgt_mask, src_mask, cache, need_weights)

    def forward(self, src_ids: Tensor, tgt_ids: Tensor) -> Tensor:
        """Teacher forcing: logits for every target position at once.

        Args:
            src_ids: (B, S); tgt_ids: decoder input (B, T) = <s> y1 .. y_{T-1}.
        Shape:
            returns logits (B, T, V); position t scores the word that follows tgt_ids[:, :t+1].
        """
        memory, src_mask = self.encode(src_ids)
        return self.decode(tgt_ids, memory, src_mask)

    def hidden_states(self, src_ids: Tensor, tgt_ids: Tensor) -> Tensor:
        """Teacher forcing up to the final linear layer, which a fused loss applies itself
        (training/chunked_loss.py): ``forward`` is ``self.output(hidden_states(...))``.

        Shape:
            src_ids (B, S), tgt_ids (B, T) -> decoder output (B, T, D).
        """
        memory, src_mask = self.encode(src_ids)
        hidden, _ = self._decode_hidden(tgt_ids, memory, src_mask, None, need_weights=False)
        return hidden

    def log_probs(self, logits: Tensor) -> Tensor:
        """log softmax over the vocabulary: (..., V) -> (..., V)."""
        return torch.log_softmax(logits.float(), dim=-1)

    def probabilities(self, logits: Tensor) -> Tensor:
        """The final softmax: a distribution over the target vocabulary, (..., V) -> (..., V)."""
        return torch.softmax(logits.float(), dim=-1)

    def new_cache(self) -> DecoderCache:
        """An empty key/value cache for incremental decoding."""
        return DecoderCache.empty(len(self.decoder.layers))

    @torch.no_grad()
    def attention_maps(self, src_ids: Tensor, tgt_ids: Tensor) -> AttentionMaps:
        """All attention weights for a source and a (forced) target, through the reference path."""
        src_mask = padding_mask(src_ids, PAD_ID)
        memory, enc_weights = self.encoder(self.src_embed(src_ids), src_mask, need_weights=True)
        _, dec_weights = self._decode_hidden(tgt_ids, memory, src_mask, None, need_weights=True)
        assert enc_weights is not None and dec_weights is not None
        return AttentionMaps(encoder=enc_weights, decoder=dec_weights)
