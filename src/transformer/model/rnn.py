"""The RNN encoder-decoder: what the Transformer replaced, with the Transformer's interface.

    source ids ──► embedding ──► bidirectional GRU/LSTM ──► annotations h_1 .. h_Ts ──┐
    target ids ──► embedding ──► decoder RNN (+ attention over h) ──► readout ──► Linear ──► softmax
    (shifted right: <s> y1 y2 ...)

(rnn_encoder.py, rnn_attention.py, rnn_decoder.py; Bahdanau et al. 2015, Luong et al. 2015.)
It implements ``EncoderDecoder`` (base.py) as the Transformer does, so the same greedy and beam
search, training loop, checkpoints, evaluation and ``attention`` figures work for both. Its
"memory" is the source annotations; its cache is an ``RNNState``.

Shapes: B batch, S source length, T target length, H hidden units, E embedding width,
V target vocabulary.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from ..config import ModelConfig
from ..errors import UserError
from ..vocab import PAD_ID
from .base import AttentionMaps, EncoderDecoder, check_token_ids
from .decoder import DecoderAttention
from .layers import Dropout
from .rnn_decoder import RNNDecoder, RNNState
from .rnn_encoder import RNNEncoder

NO_ATTENTION = ("this RNN has no attention (model.rnn_attention = none): its decoder sees one "
                "fixed vector, so there are no weights to draw")  # fmt: skip


def _embedding(vocab_size: int, width: int) -> nn.Embedding:
    """A word-embedding table, N(0, 1/E) like the Transformer's (tied to the output layer, this
    keeps the first logits small); the padding row stays zero."""
    table = nn.Embedding(vocab_size, width, padding_idx=PAD_ID)
    nn.init.normal_(table.weight, std=width**-0.5)
    with torch.no_grad():
        table.weight[PAD_ID].zero_()
    return table


class RNNEncoderDecoder(EncoderDecoder):
    """The encoder-decoder with a GRU or LSTM, without attention or with Bahdanau's or Luong's."""

    encodes_positions = False  # word order comes from the recurrence

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.config = config
        src_tokens = _embedding(config.src_vocab_size, config.rnn_embedding)
        tgt_tokens = (
            src_tokens
            if config.share_embeddings
            else _embedding(config.tgt_vocab_size, config.rnn_embedding)
        )
        self.encoder = RNNEncoder(config, src_tokens)
        self.decoder = RNNDecoder(config, tgt_tokens)
        self.dropout = Dropout(config.rnn_dropout)
        # The output layer: one score (logit) per target-vocabulary word, from the readout.
        self.output = nn.Linear(config.rnn_embedding, config.tgt_vocab_size, bias=False)
        self._init_linear_weights()  # as the Transformer's
        if config.tie_output:
            self.output.weight = tgt_tokens.weight

    def encode(self, src_ids: Tensor) -> tuple[Tensor, Tensor]:
        """Runs the encoder.

        Args:
            src_ids: source token ids (B, S), padded with PAD_ID.
        Shape:
            returns the annotations (B, S, 2H) and the source padding mask (B, 1, 1, S).
        """
        check_token_ids(src_ids, "src_ids", vocab_size=self.config.src_vocab_size)
        return self.encoder(src_ids)

    def decode_hidden(
        self,
        tgt_ids: Tensor,
        memory: Tensor,
        src_mask: Tensor,
        cache: RNNState | None = None,
    ) -> Tensor:
        """Runs the decoder up to the output layer (``EncoderDecoder.decode_hidden``); with a
        cache, the state holds the earlier positions.

        Shape:
            returns the readout after dropout (B, T, E).
        """
        return self._decoded(tgt_ids, memory, src_mask, cache, need_weights=False)[0]

    def decode_aligned(
        self, tgt_ids: Tensor, memory: Tensor, src_mask: Tensor, cache: RNNState | None = None
    ) -> tuple[Tensor, Tensor]:
        """The readout (B, T, E) and the attention weights α (B, T, S) of every position
        (``EncoderDecoder.decode_aligned``)."""
        readout, alphas = self._decoded(tgt_ids, memory, src_mask, cache, need_weights=True)
        assert alphas is not None
        return readout, alphas.float()

    def _decoded(
        self, tgt_ids: Tensor, memory: Tensor, src_mask: Tensor, cache: RNNState | None,
        need_weights: bool,
    ) -> tuple[Tensor, Tensor | None]:  # fmt: skip
        """The readout after dropout (B, T, E) and, if ``need_weights``, α (B, T, S)."""
        if need_weights and not self.attention_kinds:
            raise UserError(NO_ATTENTION)
        vocab = self.config.tgt_vocab_size if cache is None else 0  # a search makes its own
        check_token_ids(tgt_ids, "tgt_ids", memory, vocab_size=vocab)
        state = cache if cache is not None else RNNState()
        readout, alphas = self.decoder(tgt_ids, memory, src_mask, state, need_weights)
        return self.dropout(readout), alphas

    def new_cache(self, length: int = 0) -> RNNState:
        """An empty decoder state for incremental decoding (its size does not grow with
        ``length``)."""
        return RNNState()

    @torch.no_grad()
    def attention_maps(self, src_ids: Tensor, tgt_ids: Tensor) -> AttentionMaps:
        """The attention weights α_ij for a source and a (forced) target, drawn as the
        Transformer's encoder-decoder attention: one layer, one head, no self-attention.

        Shape:
            returns AttentionMaps(encoder=[], decoder=[cross (B, 1, T, S)]).
        """
        if not self.attention_kinds:
            raise UserError(NO_ATTENTION)
        memory, src_mask = self.encode(src_ids)
        _, alphas = self.decoder(tgt_ids, memory, src_mask, RNNState(), need_weights=True)
        assert alphas is not None
        return AttentionMaps(encoder=[], decoder=[DecoderAttention(None, alphas[:, None])])

    def parts(self) -> list[tuple[str, list[nn.Module]]]:
        """The parts along the data flow (``EncoderDecoder.parts``)."""
        config, decoder = self.config, self.decoder
        shared = " (shared with source)" if config.share_embeddings else ""
        cell, attention = config.rnn_cell.upper(), config.rnn_attention
        tied = " (tied to target embedding)" if config.tie_output else ""
        return [
            ("source word embedding", [self.encoder.embedding]),
            (f"target word embedding{shared}", [decoder.embedding]),
            (f"encoder bidirectional {cell} x{config.rnn_layers}", [self.encoder.rnn]),
            ("decoder initial state s_0 (W_s)", [decoder.bridge]),
            (f"decoder {cell} x{config.rnn_layers}", [decoder.rnn]),
            (f"attention ({attention})", [decoder.attention] if decoder.attention else []),
            ("readout", [decoder.readout]),
            (f"output linear{tied}", [self.output]),
        ]

    def once_per_batch(self) -> list[nn.Module]:
        """The encoder, the initial state and the attention's keys (``RNNDecoder.start``)."""
        attention = self.decoder.attention
        return [self.encoder, self.decoder.bridge, *([attention.key] if attention else [])]

    @property
    def width(self) -> int:
        """The hidden units of each RNN (rnn_hidden)."""
        return self.config.rnn_hidden

    @property
    def alignment_layer(self) -> int:
        """Its one attention, α_ij."""
        return 0

    @property
    def attention_kinds(self) -> tuple[str, ...]:
        """Encoder-decoder attention (α_ij, one layer of one head), or none."""
        return () if self.config.rnn_attention == "none" else ("cross",)

    @property
    def name(self) -> str:
        cell, attention = self.config.rnn_cell.upper(), self.config.rnn_attention
        if attention == "none":
            return f"{cell}, no attention"
        return f"{cell} + {attention.capitalize()} attention"

    @property
    def summary(self) -> str:
        config = self.config
        return (
            f"rnn cell={config.rnn_cell} attention={config.rnn_attention} "
            f"hidden={config.rnn_hidden} embedding={config.rnn_embedding} "
            f"layers={config.rnn_layers} vocab={config.src_vocab_size}/{config.tgt_vocab_size}"
        )
