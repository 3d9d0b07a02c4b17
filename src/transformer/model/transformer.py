"""The Transformer: embeddings, encoder, decoder, and the final linear layer + softmax (Figure 1).

    source ids ──► Embeddings ──► Encoder ──► memory ─────────────┐
    target ids ──► Embeddings ──► Decoder (masked self-attn, enc-dec attn) ──► Linear ──► softmax
    (shifted right: <s> y1 y2 ...)

It implements ``EncoderDecoder`` (base.py), where ``decode``, ``forward``, ``hidden_states`` and
the final softmax are written once for it and the RNN encoder-decoder.

Shapes: B batch, S source length, T target length, D model width, V target vocabulary.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from ..config import ModelConfig
from ..vocab import PAD_ID
from .base import ATTENTION_KINDS, AttentionMaps, EncoderDecoder, check_token_ids
from .cache import DecoderCache, FixedStep
from .decoder import Decoder, DecoderAttention
from .embeddings import Embeddings, TokenEmbedding
from .encoder import Encoder
from .linear import Linear
from .masks import combined_mask, padding_mask


class Transformer(EncoderDecoder):
    """The encoder-decoder Transformer of "Attention Is All You Need"."""

    attention_kinds = ATTENTION_KINDS
    encodes_positions = True
    beams_share_memory = True  # the decoder's encoder-decoder attention folds the beams

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
        self.output = Linear(config.d_model, config.tgt_vocab_size, bias=config.output_bias)
        self._init_linear_weights()
        if config.tie_output:
            self.output.weight = tgt_tokens.weight

    def encode(self, src_ids: Tensor) -> tuple[Tensor, Tensor]:
        """Runs the encoder.

        Args:
            src_ids: source token ids (B, S), padded with PAD_ID.
        Shape:
            returns memory (B, S, D) and the source padding mask (B, 1, 1, S).
        """
        check_token_ids(src_ids, "src_ids", vocab_size=self.config.src_vocab_size)
        src_mask = padding_mask(src_ids, PAD_ID)  # (B, 1, 1, S)
        memory, _ = self.encoder(self.src_embed(src_ids), src_mask)
        return memory, src_mask

    def decode_hidden(
        self,
        tgt_ids: Tensor,
        memory: Tensor,
        src_mask: Tensor,
        cache: DecoderCache | FixedStep | None = None,
    ) -> Tensor:
        """Runs the decoder stack (``EncoderDecoder.decode_hidden``).

        Shape:
            returns the decoder output (B, T, D), D = d_model.
        """
        hidden, _ = self._run_decoder(tgt_ids, memory, src_mask, cache, need_weights=False)
        return hidden  # (B, T, D)

    def decode_aligned(
        self,
        tgt_ids: Tensor,
        memory: Tensor,
        src_mask: Tensor,
        cache: DecoderCache | FixedStep | None = None,
    ) -> tuple[Tensor, Tensor]:
        """The decoder output (B, T, D) and the last layer's encoder-decoder attention averaged
        over its heads (B, T, S) (``EncoderDecoder.decode_aligned``): a search's step through
        the layers' ``step`` as ``decode_hidden``'s, only the last layer keeping its weights;
        anything else through the reference path."""
        x, tgt_mask = self._decoder_input(tgt_ids, memory, cache)
        if self.decoder.can_step(x, tgt_mask, cache):
            hidden, cross = self.decoder.steps(x, memory, src_mask, cache, self.alignment_layer)
        else:
            hidden, weights = self.decoder(x, memory, tgt_mask, src_mask, cache, need_weights=True)
            assert weights is not None
            cross = weights[self.alignment_layer].cross_attention
        assert cross is not None
        return hidden, cross.float().mean(dim=1)  # (B, H, T, S) -> (B, T, S)

    def _run_decoder(
        self,
        tgt_ids: Tensor,
        memory: Tensor,
        src_mask: Tensor,
        cache: DecoderCache | FixedStep | None,
        need_weights: bool,
    ) -> tuple[Tensor, list[DecoderAttention] | None]:
        """Decoder hidden states (B, T, D) with the right self-attention mask."""
        x, tgt_mask = self._decoder_input(tgt_ids, memory, cache)
        return self.decoder(x, memory, tgt_mask, src_mask, cache, need_weights)

    def _decoder_input(
        self, tgt_ids: Tensor, memory: Tensor, cache: DecoderCache | FixedStep | None
    ) -> tuple[Tensor, Tensor | None]:
        """The embedded target positions (B, T, D) and their self-attention mask."""
        vocab = self.config.tgt_vocab_size if cache is None else 0  # a search makes its own
        check_token_ids(tgt_ids, "tgt_ids", memory, self.beams_share_memory, vocab)
        if cache is None:
            past: int | Tensor = 0
            tgt_mask = combined_mask(tgt_ids, PAD_ID)  # (B, 1, T, T)
        else:  # the new positions after the cached ones: (1, 1, T, t + T), or None for one
            past = cache.length
            tgt_mask = cache.step_mask(tgt_ids.size(1), tgt_ids.device)
        return self.tgt_embed(tgt_ids, offset=past), tgt_mask  # (B, T, D)

    def new_cache(self, length: int = 0) -> DecoderCache:
        """An empty key/value cache for incremental decoding of up to ``length`` positions
        (0: not known); its buffers grow as needed."""
        return DecoderCache.empty(len(self.decoder.layers), length)

    @torch.no_grad()
    def attention_maps(self, src_ids: Tensor, tgt_ids: Tensor) -> AttentionMaps:
        """All attention weights for a source and a (forced) target, through the reference path."""
        src_mask = padding_mask(src_ids, PAD_ID)
        memory, enc_weights = self.encoder(self.src_embed(src_ids), src_mask, need_weights=True)
        _, dec_weights = self._run_decoder(tgt_ids, memory, src_mask, None, need_weights=True)
        assert enc_weights is not None and dec_weights is not None
        return AttentionMaps(encoder=enc_weights, decoder=dec_weights)

    def parts(self) -> list[tuple[str, list[nn.Module]]]:
        """The parts of Figure 1, bottom to top (``EncoderDecoder.parts``)."""
        config = self.config
        shared = " (shared with source)" if config.share_embeddings else ""
        rows = [
            ("source token embedding", [self.src_embed.tokens]),
            (f"target token embedding{shared}", [self.tgt_embed.tokens]),
            (f"source positional encoding ({config.positional})", [self.src_embed.positions]),
            (f"target positional encoding ({config.positional})", [self.tgt_embed.positions]),
        ]
        for i, layer in enumerate(self.encoder.layers, 1):
            rows.append((f"encoder {i} self-attention", [layer.self_attn]))
            rows.append((f"encoder {i} add & norm x2", [layer.norm1, layer.norm2]))
            rows.append((f"encoder {i} feed-forward", [layer.feed_forward]))
        rows.append(("encoder final norm", [self.encoder.final_norm]))
        for i, layer in enumerate(self.decoder.layers, 1):
            rows.append((f"decoder {i} masked self-attention", [layer.self_attn]))
            rows.append((f"decoder {i} encoder-decoder attention", [layer.cross_attn]))
            rows.append((f"decoder {i} add & norm x3", [layer.norm1, layer.norm2, layer.norm3]))
            rows.append((f"decoder {i} feed-forward", [layer.feed_forward]))
        rows.append(("decoder final norm", [self.decoder.final_norm]))
        tied = " (tied to target embedding)" if config.tie_output else ""
        return [*rows, (f"output linear{tied}", [self.output])]

    def once_per_batch(self) -> list[nn.Module]:
        """The encoder, and the encoder-decoder attention's keys and values (cache.py)."""
        cross = [layer.cross_attn for layer in self.decoder.layers]
        return [self.encoder, *(m for attn in cross for m in (attn.w_k, attn.w_v))]

    @property
    def width(self) -> int:
        """d_model."""
        return self.config.d_model

    @property
    def alignment_layer(self) -> int:
        """The last decoder layer; inference/alignment.py says why."""
        return len(self.decoder.layers) - 1

    @property
    def name(self) -> str:
        layers = f"{self.config.n_encoder_layers}+{self.config.n_decoder_layers}"
        return f"Transformer (d {self.config.d_model}, {layers})"

    @property
    def summary(self) -> str:
        config = self.config
        return (
            f"d_model={config.d_model} heads={config.n_heads} d_ff={config.d_ff} "
            f"layers={config.n_encoder_layers}+{config.n_decoder_layers} "
            f"vocab={config.src_vocab_size}/{config.tgt_vocab_size} "
            f"{'pre' if config.norm_first else 'post'}-norm"
        )
