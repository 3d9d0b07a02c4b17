"""The RNN encoder: a bidirectional GRU or LSTM over the source words (Bahdanau et al. 2015, §3.2).

A forward RNN reads x_1 .. x_Ts and a backward one reads x_Ts .. x_1; the annotation of word j
joins both hidden states, h_j = [→h_j ; ←h_j], so that it "contains information about the whole
input sequence with a strong focus on the parts surrounding the j-th word" (the notes, Bahdanau
§3.1). Unlike the Transformer's encoder, the states come one after another: →h_j needs →h_{j-1}
("TRANSFORMERS ≠ LSTM RNN": the words cannot be sent in parallel).

Padded batches are packed (``pack_padded_sequence``): each direction stops at its sentence's own
last word, so a sentence gets the same annotations alone and inside a padded batch.

Shapes: B batch, S source length, E embedding width, H hidden units per direction.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from ..config import ModelConfig
from .layers import Dropout
from .masks import padding_mask

CELLS = {"gru": nn.GRU, "lstm": nn.LSTM}


class RNNEncoder(nn.Module):
    """Embeddings, dropout, and a stack of bidirectional GRU or LSTM layers."""

    def __init__(self, config: ModelConfig, embedding: nn.Embedding) -> None:
        super().__init__()
        self.embedding = embedding
        self.dropout = Dropout(config.rnn_dropout)
        self.rnn = CELLS[config.rnn_cell](
            config.rnn_embedding,
            config.rnn_hidden,
            num_layers=config.rnn_layers,
            dropout=config.rnn_dropout if config.rnn_layers > 1 else 0.0,
            bidirectional=True,
            batch_first=True,
        )

    def forward(self, src_ids: Tensor) -> tuple[Tensor, Tensor]:
        """The annotations h_1 .. h_Ts of every source word.

        Args:
            src_ids: source ids (B, S), right-padded with PAD_ID; every row has a real token.
        Shape:
            returns annotations (B, S, 2H), zero at padding, and the padding mask (B, 1, 1, S).
        """
        src_mask = padding_mask(src_ids)  # (B, 1, 1, S)
        lengths = src_mask.sum(dim=-1).flatten()  # (B,)
        x = self.dropout(self.embedding(src_ids))  # (B, S, E)
        packed = pack_padded_sequence(x, lengths.cpu(), batch_first=True, enforce_sorted=False)
        annotations, _ = self.rnn(packed)
        annotations, _ = pad_packed_sequence(
            annotations, batch_first=True, total_length=src_ids.size(1)
        )  # (B, S, 2H)
        return annotations, src_mask


def final_states(annotations: Tensor, src_mask: Tensor) -> Tensor:
    """The summary of the whole sentence: [→h_Ts ; ←h_1], the last state of each direction.

    This is the fixed-length vector c of the encoder-decoder without attention (Cho et al.
    2014), and what initialises the decoder in all three decoders (Bahdanau's s_0 uses ←h_1).

    Args:
        annotations: (B, S, 2H) from ``RNNEncoder``; src_mask: (B, 1, 1, S).
    Shape:
        returns (B, 2H).
    """
    hidden = annotations.size(-1) // 2
    last = src_mask.sum(dim=-1).flatten() - 1  # (B,) index of each sentence's last real token
    rows = torch.arange(annotations.size(0), device=annotations.device)  # (B,)
    forward = annotations[rows, last, :hidden]  # (B, H) the forward RNN after the last word
    backward = annotations[:, 0, hidden:]  # (B, H) the backward RNN after the first word
    return torch.cat([forward, backward], dim=-1)  # (B, 2H)
