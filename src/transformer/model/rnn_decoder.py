"""The RNN decoder, one target word at a time, with its per-step state.

The three decoders the notes lead through, in their notation (y_{i-1} the previous target word,
s_i the decoder state, c_i the context, h_j the source annotations, E the embedding):

    none      (Cho et al. 2014; the encoder-decoder of the notes)
              c = [→h_Ts ; ←h_1], one fixed vector for the whole sentence
              s_i = f(s_{i-1}, y_{i-1}, c),        p(y_i | y_<i, x) = g(y_{i-1}, s_i, c)
    bahdanau  (Bahdanau et al. 2015, §3.1; the notes' "Attention Mechanism")
              c_i = Σ_j α_ij h_j with α_i from s_{i-1}   (rnn_attention.py, additive)
              s_i = f(s_{i-1}, y_{i-1}, c_i),      p(y_i | y_<i, x) = g(y_{i-1}, s_i, c_i)
    luong     (Luong et al. 2015, §3.1 and §3.3 "input feeding")
              s_i = f(s_{i-1}, [E y_{i-1} ; h̃_{i-1}]), c_i = Σ_j α_ij h_j with α_i from s_i,
              h̃_i = tanh(W_c [c_i ; s_i]),          p(y_i | y_<i, x) = softmax(W_o h̃_i)

f is a GRU or an LSTM (``nn.GRU`` / ``nn.LSTM``); the readout g is t_i = tanh(W_t [E y_{i-1} ;
s_i ; c_i]) followed by the output layer (Bahdanau's deep output uses a maxout instead of tanh).
Every decoder starts from s_0 = tanh(W_s [→h_Ts ; ←h_1]) (Bahdanau A.2.2 uses ←h_1 alone).

With attention, c_i depends on s_{i-1} (or h̃_{i-1}), so even teacher forcing runs the target
words one after another: this loop is what the Transformer's masked self-attention removes. The
decoder without attention hands its whole input to the cell at once (the cell still steps
inside).

``RNNState`` is what the decoder carries from one step to the next, in place of the
Transformer's key/value cache (cache.py), with the same ``reorder`` and ``keep`` for the search.

Shapes: B batch, T target positions (new ones), S source length, L layers, H hidden units,
E embedding width, Dv annotation width (2H), A attention width.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from ..config import ModelConfig
from .layers import Dropout
from .rnn_attention import AdditiveAttention, MultiplicativeAttention
from .rnn_encoder import CELLS, final_states

Hidden = Tensor | tuple[Tensor, Tensor]  # GRU: s (L, B, H); LSTM: (s, memory cell), both (L, B, H)


@dataclass
class RNNState:
    """The decoder's state between steps; empty until the first step fills it from the source."""

    hidden: Hidden | None = None  # s_{i-1}, per layer
    feed: Tensor | None = None  # Luong's input feeding: h̃_{i-1} (B, 1, E)
    keys: Tensor | None = None  # the attention's projected annotations (B, S, A), per source
    context: Tensor | None = None  # no attention: the fixed c (B, 1, Dv), per source
    length: int = 0  # target positions decoded so far

    def reorder(self, index: Tensor) -> None:
        """Beam search: row i continues hypothesis ``index[i]`` of the same sentence; the
        per-source entries are the same for every beam of a sentence and stay."""
        self.hidden = _select_hidden(self.hidden, index)
        if self.feed is not None:
            self.feed = self.feed.index_select(0, index)

    def keep(self, index: Tensor, sentences: Tensor) -> None:
        """Keeps only the batch rows ``index`` (e.g. the sentences that are not finished); the
        per-source entries move by ``sentences`` (one per row: the RNN's beams do not share)."""
        self.reorder(index)
        if self.keys is not None:
            self.keys = self.keys.index_select(0, sentences)
        if self.context is not None:
            self.context = self.context.index_select(0, sentences)


def _select_hidden(hidden: Hidden | None, index: Tensor) -> Hidden | None:
    """Rows ``index`` of every layer's state (the batch is dim 1 of an RNN's state)."""
    if hidden is None:
        return None
    if isinstance(hidden, tuple):
        return hidden[0].index_select(1, index), hidden[1].index_select(1, index)
    return hidden.index_select(1, index)


def _top(hidden: Hidden) -> Tensor:
    """The top layer's state, as one query per row: (L, B, H) -> (B, 1, H)."""
    states = hidden[0] if isinstance(hidden, tuple) else hidden
    return states[-1][:, None]  # (B, 1, H)


class RNNDecoder(nn.Module):
    """The decoder RNN, its attention (if any) and the readout g."""

    def __init__(self, config: ModelConfig, embedding: nn.Embedding) -> None:
        super().__init__()
        E, H, L = config.rnn_embedding, config.rnn_hidden, config.rnn_layers
        self.kind, self.cell = config.rnn_attention, config.rnn_cell
        self.layers, self.hidden_size = L, H
        self.embedding = embedding
        self.dropout = Dropout(config.rnn_dropout)
        self.bridge = nn.Linear(2 * H, L * H)  # W_s: s_0 from the encoder's final states
        fed = E if self.kind == "luong" else 2 * H  # h̃_{i-1}, or the context c_i
        self.rnn = CELLS[config.rnn_cell](
            E + fed, H, num_layers=L, dropout=config.rnn_dropout if L > 1 else 0.0,
            batch_first=True,
        )  # fmt: skip
        self.attention: nn.Module | None = {
            "bahdanau": lambda: AdditiveAttention(H, 2 * H, H),
            "luong": lambda: MultiplicativeAttention(H, 2 * H),
            "none": lambda: None,
        }[self.kind]()
        # The readout: tanh(W_t [E y_{i-1} ; s_i ; c_i]), or Luong's tanh(W_c [c_i ; s_i]).
        read = 3 * H if self.kind == "luong" else E + 3 * H
        self.readout = nn.Linear(read, E)

    def start(self, state: RNNState, annotations: Tensor, src_mask: Tensor) -> None:
        """Fills an empty state from the source: s_0, and the keys or the fixed context."""
        B = annotations.size(0)
        summary = final_states(annotations, src_mask)  # (B, 2H)
        s0 = torch.tanh(self.bridge(summary))  # (B, L·H)
        s0 = s0.view(B, self.layers, self.hidden_size).transpose(0, 1).contiguous()  # (L, B, H)
        state.hidden = (s0, torch.zeros_like(s0)) if self.cell == "lstm" else s0
        if self.attention is None:
            state.context = summary[:, None]  # (B, 1, 2H)
        else:
            state.keys = self.attention.project_keys(annotations)  # (B, S, A)
        if self.kind == "luong":
            state.feed = annotations.new_zeros(B, 1, self.readout.out_features)  # h̃_0 = 0

    def forward(
        self,
        tgt_ids: Tensor,
        annotations: Tensor,
        src_mask: Tensor,
        state: RNNState,
        need_weights: bool = False,
    ) -> tuple[Tensor, Tensor | None]:
        """Decodes the target positions ``tgt_ids`` on from ``state`` (updated in place).

        Args:
            tgt_ids: decoder input ids (B, T): <s> y_1 .. at the start, then the new words.
            annotations: (B, S, 2H) and src_mask (B, 1, 1, S) from the encoder.
            state: an empty ``RNNState`` (filled here) or the one of earlier steps.
        Shape:
            returns readouts t (B, T, E) and, if ``need_weights`` (with attention), α (B, T, S).
        """
        if state.hidden is None:
            self.start(state, annotations, src_mask)
        state.length += tgt_ids.size(1)
        y = self.dropout(self.embedding(tgt_ids))  # (B, T, E)
        if self.attention is None:  # the same c at every step: one call for all of them
            context = state.context.expand(-1, y.size(1), -1)  # (B, T, 2H)
            s, state.hidden = self.rnn(torch.cat([y, context], dim=-1), state.hidden)  # (B, T, H)
            return self._read(y, s, context), None
        outputs, weights = [], []
        for i in range(y.size(1)):  # one target word after another
            y_prev = y[:, i : i + 1]  # (B, 1, E): E y_{i-1}
            if self.kind == "bahdanau":  # α_i from s_{i-1}, then s_i
                context, alpha = self.attention(_top(state.hidden), state.keys, annotations,
                                                src_mask)  # (B, 1, 2H), (B, 1, S)  # fmt: skip
                s, state.hidden = self.rnn(torch.cat([y_prev, context], dim=-1), state.hidden)
                out = self._read(y_prev, s, context)  # (B, 1, E)
            else:  # luong: s_i from y_{i-1} and h̃_{i-1}, then α_i from s_i
                s, state.hidden = self.rnn(torch.cat([y_prev, state.feed], dim=-1), state.hidden)
                context, alpha = self.attention(s, state.keys, annotations, src_mask)
                out = state.feed = torch.tanh(self.readout(torch.cat([context, s], dim=-1)))
            outputs.append(out)
            weights.append(alpha)
        alphas = torch.cat(weights, dim=1) if need_weights else None  # (B, T, S)
        return torch.cat(outputs, dim=1), alphas  # (B, T, E)

    def _read(self, y_prev: Tensor, s: Tensor, context: Tensor) -> Tensor:
        """g's hidden layer t_i = tanh(W_t [E y_{i-1} ; s_i ; c_i]): (B, T, E)."""
        return torch.tanh(self.readout(torch.cat([y_prev, s, context], dim=-1)))
