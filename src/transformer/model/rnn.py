"""The RNN encoder-decoder: what the Transformer replaced, with the Transformer's interface.

    source ids ──► embedding ──► bidirectional GRU/LSTM ──► annotations h_1 .. h_Ts ──┐
    target ids ──► embedding ──► decoder RNN (+ attention over h) ──► readout ──► Linear ──► softmax
    (shifted right: <s> y1 y2 ...)

(rnn_encoder.py, rnn_attention.py, rnn_decoder.py; Bahdanau et al. 2015, Luong et al. 2015.)
It answers the calls a search makes of a ``Transformer`` (``encode``, ``decode`` with a state
from ``new_cache``, ``log_probs``), so the same greedy and beam search, training loop,
checkpoints, evaluation and ``attention`` figures work for both. Its "memory" is the source
annotations; its cache is an ``RNNState``.

Shapes: B batch, S source length, T target length, H hidden units, E embedding width,
V target vocabulary.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from ..config import ModelConfig
from ..errors import UserError
from ..vocab import PAD_ID
from .decoder import DecoderAttention
from .rnn_decoder import RNNDecoder, RNNState
from .rnn_encoder import RNNEncoder
from .transformer import AttentionMaps


def _embedding(vocab_size: int, width: int) -> nn.Embedding:
    """A word-embedding table, N(0, 1/E) like the Transformer's (tied to the output layer, this
    keeps the first logits small); the padding row stays zero."""
    table = nn.Embedding(vocab_size, width, padding_idx=PAD_ID)
    nn.init.normal_(table.weight, std=width**-0.5)
    with torch.no_grad():
        table.weight[PAD_ID].zero_()
    return table


class RNNEncoderDecoder(nn.Module):
    """The encoder-decoder with a GRU or LSTM, without attention or with Bahdanau's or Luong's."""

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
        self.dropout = nn.Dropout(config.rnn_dropout)
        # The output layer: one score (logit) per target-vocabulary word, from the readout.
        self.output = nn.Linear(config.rnn_embedding, config.tgt_vocab_size, bias=False)
        for module in self.modules():  # as the Transformer's linear layers
            if isinstance(module, nn.Linear):
                nn.init.xavier_uniform_(module.weight)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
        if config.tie_output:
            self.output.weight = tgt_tokens.weight

    def encode(self, src_ids: Tensor) -> tuple[Tensor, Tensor]:
        """Runs the encoder.

        Args:
            src_ids: source token ids (B, S), padded with PAD_ID.
        Shape:
            returns the annotations (B, S, 2H) and the source padding mask (B, 1, 1, S).
        """
        return self.encoder(src_ids)

    def decode(
        self,
        tgt_ids: Tensor,
        memory: Tensor,
        src_mask: Tensor,
        cache: RNNState | None = None,
    ) -> Tensor:
        """Runs the decoder and the output layer.

        Args:
            tgt_ids: decoder input ids (B, T), starting with BOS. With a cache: only the new
                positions (the state holds the earlier ones).
            memory, src_mask: from ``encode``.
            cache: the decoder state after the earlier steps; updated in place.
        Shape:
            returns logits (B, T, V).
        """
        state = cache if cache is not None else RNNState()
        readout, _ = self.decoder(tgt_ids, memory, src_mask, state)  # (B, T, E)
        return self.output(self.dropout(readout))  # (B, T, V)

    def forward(self, src_ids: Tensor, tgt_ids: Tensor) -> Tensor:
        """Teacher forcing: logits for every target position.

        Args:
            src_ids: (B, S); tgt_ids: decoder input (B, T) = <s> y1 .. y_{T-1}.
        Shape:
            returns logits (B, T, V); position t scores the word that follows tgt_ids[:, :t+1].
        """
        memory, src_mask = self.encode(src_ids)
        return self.decode(tgt_ids, memory, src_mask)

    def hidden_states(self, src_ids: Tensor, tgt_ids: Tensor) -> Tensor:
        """Teacher forcing up to the output layer, which a fused loss applies itself
        (training/chunked_loss.py): ``forward`` is ``self.output(hidden_states(...))``.

        Shape:
            src_ids (B, S), tgt_ids (B, T) -> the readout after dropout (B, T, E).
        """
        memory, src_mask = self.encode(src_ids)
        readout, _ = self.decoder(tgt_ids, memory, src_mask, RNNState())  # (B, T, E)
        return self.dropout(readout)

    def log_probs(self, logits: Tensor) -> Tensor:
        """log softmax over the vocabulary: (..., V) -> (..., V)."""
        return torch.log_softmax(logits.float(), dim=-1)

    def probabilities(self, logits: Tensor) -> Tensor:
        """The final softmax: a distribution over the target vocabulary, (..., V) -> (..., V)."""
        return torch.softmax(logits.float(), dim=-1)

    def new_cache(self) -> RNNState:
        """An empty decoder state for incremental decoding."""
        return RNNState()

    @torch.no_grad()
    def attention_maps(self, src_ids: Tensor, tgt_ids: Tensor) -> AttentionMaps:
        """The attention weights α_ij for a source and a (forced) target, drawn as the
        Transformer's encoder-decoder attention: one layer, one head, no self-attention.

        Shape:
            returns AttentionMaps(encoder=[], decoder=[cross (B, 1, T, S)]).
        """
        if self.config.rnn_attention == "none":
            raise UserError("this RNN has no attention (model.rnn_attention = none): its decoder "
                            "sees one fixed vector, so there are no weights to draw")  # fmt: skip
        memory, src_mask = self.encode(src_ids)
        _, alphas = self.decoder(tgt_ids, memory, src_mask, RNNState(), need_weights=True)
        assert alphas is not None
        return AttentionMaps(encoder=[], decoder=[DecoderAttention(None, alphas[:, None])])
