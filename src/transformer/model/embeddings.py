"""Token embeddings and positional encodings (§3.4, §3.5).

The input to each stack is dropout(embedding(ids)·√d_model + PE(position)). Positions are either
the fixed sinusoids of the paper or a learned table; both accept at most ``max_positions``.

Shapes: B batch, T sequence length, D model width, V vocabulary size, P max positions.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from ..vocab import PAD_ID
from .layers import Dropout


class TokenEmbedding(nn.Module):
    """Looks up a D-wide vector per token id and scales it by √D (§3.4).

    Initialised N(0, D^-1/2) so that the scaled vectors have unit variance, which also suits the
    output projection when its weights are tied to this table. The padding row stays zero.
    """

    def __init__(self, vocab_size: int, d_model: int) -> None:
        super().__init__()
        self.scale = math.sqrt(d_model)
        # torch.randn's numbers, drawn through nn.init (which a model built for a checkpoint's
        # weights skips: build.py) and scaled in place (``randn(...) * s`` held a second table
        # while it was made: 119 MB at OPUS-MT's 58,101 × 512)
        weight = nn.init.normal_(torch.empty(vocab_size, d_model))  # N(0, 1)
        self.weight = nn.Parameter(weight.mul_(d_model**-0.5))
        with torch.no_grad():
            self.weight[PAD_ID].zero_()

    def forward(self, ids: Tensor) -> Tensor:
        """(B, T) -> (B, T, D)."""
        return nn.functional.embedding(ids, self.weight, padding_idx=PAD_ID) * self.scale


def sinusoidal_table(max_positions: int, d_model: int, layout: str = "interleaved") -> Tensor:
    """PE(pos, 2i) = sin(pos / 10000^(2i/D)),  PE(pos, 2i+1) = cos(pos / 10000^(2i/D)).

    Args:
        layout: "interleaved" as above (§3.5), or "halves": the same sines in columns
            0..ceil(D/2)-1 and the cosines after them, as Marian and tensor2tensor lay them out
            (Hugging Face's ``MarianSinusoidalPositionalEmbedding``). One is a permutation of
            the other's columns.
    Shape:
        returns (P, D). With an odd D there is one more sine than cosines.

    Computed on the CPU, then put on the default device: on the meta device (a model built
    for its shapes only) ``arange`` would import torch's compiler, a second of start-up.
    """
    cpu = torch.device("cpu")
    pos = torch.arange(max_positions, dtype=torch.float64, device=cpu)[:, None]  # (P, 1)
    two_i = torch.arange(0, d_model, 2, dtype=torch.float64, device=cpu)  # (ceil(D/2),) 2i
    angle = pos / 10000.0 ** (two_i / d_model)  # (P, ceil(D/2))
    sines, cosines = torch.sin(angle), torch.cos(angle[:, : d_model // 2])
    if layout == "halves":
        table = torch.cat([sines, cosines], dim=1)  # (P, D)
    else:
        table = torch.zeros(max_positions, d_model, dtype=torch.float64, device=cpu)
        table[:, 0::2] = sines
        table[:, 1::2] = cosines
    return table.to(torch.get_default_device(), torch.float)  # (P, D)


class _Positions(nn.Module):
    """Shared length check for both kinds of positional encoding."""

    max_positions: int

    def _rows(self, table: Tensor, length: int, offset: int | Tensor) -> Tensor:
        """Rows offset..offset+length-1 of ``table`` (max_positions, D): (T, D). A tensor
        ``offset`` (1,) is a compiled decoding step's position, which its search has already
        kept below max_positions (``search.length_limits``)."""
        if isinstance(offset, Tensor):
            return table[offset + torch.arange(length, device=offset.device)]  # (T, D)
        if offset + length > self.max_positions:
            raise ValueError(
                f"sequence of {offset + length} positions is longer than max_positions="
                f"{self.max_positions} (ModelConfig.max_positions); shorten the input or "
                "use a model with more positions"
            )
        return table[offset : offset + length]  # (T, D)


class SinusoidalPositionalEncoding(_Positions):
    """The paper's fixed sinusoids; no parameters (the table is a non-saved buffer)."""

    def __init__(self, max_positions: int, d_model: int, layout: str = "interleaved") -> None:
        super().__init__()
        self.max_positions = max_positions
        table = sinusoidal_table(max_positions, d_model, layout)
        self.register_buffer("table", table, persistent=False)

    def forward(self, length: int, offset: int | Tensor = 0) -> Tensor:
        """Encodings of positions offset..offset+length-1: (T, D)."""
        return self._rows(self.table, length, offset)


class LearnedPositionalEmbedding(_Positions):
    """A learned vector per position (the paper's alternative, Table 3 row E)."""

    def __init__(self, max_positions: int, d_model: int) -> None:
        super().__init__()
        self.max_positions = max_positions
        weight = nn.init.normal_(torch.empty(max_positions, d_model))  # as TokenEmbedding's
        self.weight = nn.Parameter(weight.mul_(d_model**-0.5))

    def forward(self, length: int, offset: int | Tensor = 0) -> Tensor:
        """Embeddings of positions offset..offset+length-1: (T, D)."""
        return self._rows(self.weight, length, offset)


class Embeddings(nn.Module):
    """Token embedding + positional encoding, then dropout: the input of a stack."""

    def __init__(
        self,
        tokens: TokenEmbedding,
        positional: str,
        max_positions: int,
        dropout: float,
        layout: str = "interleaved",
    ) -> None:
        super().__init__()
        d_model = tokens.weight.size(1)
        self.tokens = tokens
        self.positions: _Positions
        if positional == "sinusoidal":
            self.positions = SinusoidalPositionalEncoding(max_positions, d_model, layout)
        else:
            self.positions = LearnedPositionalEmbedding(max_positions, d_model)
        self.dropout = Dropout(dropout)

    def forward(self, ids: Tensor, offset: int | Tensor = 0) -> Tensor:
        """Ids at positions offset.. (offset > 0 in step-by-step decoding): (B, T) -> (B, T, D)."""
        x = self.tokens(ids)  # (B, T, D)
        return self.dropout(x + self.positions(ids.size(1), offset))  # (B, T, D)
