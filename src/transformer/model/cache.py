"""The key/value cache for incremental decoding.

At generation step t the decoder only needs the new token's query: the keys and values of
tokens 0..t-1 were computed at earlier steps and do not change (the look-ahead mask means no
token ever sees a later one). So each decoder layer keeps
- its masked self-attention keys and values, one step appended per call;
- its encoder-decoder keys and values, computed once from the encoder output.

Shapes: B batch (times beams), H heads, t steps so far, S source length, Dh head width.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor


@dataclass
class LayerCache:
    """What one decoder layer has already computed."""

    self_keys: Tensor | None = None  # (B, H, t, Dh), grows by the new steps on every call
    self_values: Tensor | None = None  # (B, H, t, Dh)
    cross_keys: Tensor | None = None  # (B, H, S, Dh), set once per source
    cross_values: Tensor | None = None  # (B, H, S, Dh)

    def append(self, keys: Tensor, values: Tensor) -> tuple[Tensor, Tensor]:
        """Adds the new steps' self-attention keys and values; returns all of them so far."""
        if self.self_keys is None or self.self_values is None:
            self.self_keys, self.self_values = keys, values
        else:
            self.self_keys = torch.cat([self.self_keys, keys], dim=2)  # (B, H, t + new, Dh)
            self.self_values = torch.cat([self.self_values, values], dim=2)
        return self.self_keys, self.self_values

    def select(self, index: Tensor, cross: bool) -> None:
        """Keeps rows ``index`` of the batch (beam reordering; dropping finished sentences)."""
        if self.self_keys is not None and self.self_values is not None:
            self.self_keys = self.self_keys.index_select(0, index)
            self.self_values = self.self_values.index_select(0, index)
        if cross and self.cross_keys is not None and self.cross_values is not None:
            self.cross_keys = self.cross_keys.index_select(0, index)
            self.cross_values = self.cross_values.index_select(0, index)


@dataclass
class DecoderCache:
    """One ``LayerCache`` per decoder layer, plus how many target steps they hold."""

    layers: list[LayerCache] = field(default_factory=list)

    @classmethod
    def empty(cls, n_layers: int) -> DecoderCache:
        return cls([LayerCache() for _ in range(n_layers)])

    @property
    def length(self) -> int:
        """Number of target positions already decoded (the offset of the next one)."""
        keys = self.layers[0].self_keys if self.layers else None
        return 0 if keys is None else keys.size(2)

    def reorder(self, index: Tensor) -> None:
        """Beam search: row i of the new batch continues hypothesis ``index[i]``.

        Only the self-attention entries move; the encoder-decoder ones are the same for every
        beam of a sentence, so they stay as they are.
        """
        for layer in self.layers:
            layer.select(index, cross=False)

    def keep(self, index: Tensor) -> None:
        """Keeps only the batch rows ``index`` (e.g. the sentences that are not finished)."""
        for layer in self.layers:
            layer.select(index, cross=True)
