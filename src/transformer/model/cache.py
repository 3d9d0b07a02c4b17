"""The key/value cache for incremental decoding.

At generation step t the decoder only needs the new token's query: the keys and values of
tokens 0..t-1 were computed at earlier steps and do not change (the look-ahead mask means no
token ever sees a later one). So each decoder layer keeps
- its masked self-attention keys and values, one step appended per call;
- its encoder-decoder keys and values, computed once from the encoder output.

How they are stored, for speed (benchmarks/profile_decode.py; docs/speed.md). The
self-attention keys and values of a layer live in one buffer, written in place: a step copies
only its own new keys and values, where ``torch.cat`` copied every earlier step again at every
step. A buffer starts with room for ``GROWTH`` positions; one that is full is replaced by one
a quarter longer, in whole steps of ``GROWTH`` (never longer than the longest output the search
allows), so that the room it holds follows the longest output so far. A beam search's
reordering (and the leaving of finished sentences) gathers each layer's rows with one
``index_select`` into a spare buffer, which then becomes the layer's, and the layer's old one
the spare of the next: no new memory per step, and one buffer more than the layers have. When
half the rows or more have left, the rows are gathered into smaller buffers instead, so that
the memory of finished sentences goes back. The attention reads views of the first ``length``
positions.

Memory, measured (Multi30k test2016, 64 sentences a batch, two batches at once on 2 threads;
docs/speed.md): buffers that started at 32 positions and doubled held up to twice the room the
outputs needed, and beam search's 256 rows kept their room after most sentences had finished.

Compiled decoding (``inference/compiled.py``) needs shapes that do not change from step to
step: its cache is ``fixed``, every buffer as long as the longest output from the start, and
the compiled step sees it through ``FixedStep``: it writes the new keys and values at
``position`` (a tensor) and attends over every slot, the empty ones masked
(``masks.filled_slots_mask``). Buffers start as zeros, so an empty slot holds finite numbers
that its zero attention weight cancels.

Shapes: B batch (times beams), H heads, t steps so far, S source length, Dh head width.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor

from .attention import Blocked
from .masks import filled_slots_mask, look_ahead_mask

# Positions a buffer has room for at first, and the step its room grows by (at least a quarter
# of it at a time, so that growing copies the buffer O(log length) times). A buffer sized for
# the longest output allowed took 3 times the memory for a beam search on Multi30k.
GROWTH = 8


class LayerCache:
    """What one decoder layer has already computed."""

    def __init__(self, limit: int = 0, fixed: bool = False) -> None:
        self.length = 0  # positions cached
        self.rows = 0  # batch rows in use: the first ``rows`` of the buffer
        self.limit = limit  # the most positions the search will cache (0: not known)
        self.fixed = fixed  # every slot attended to (masked): its buffers hold zeros, not garbage
        # positions it has room for; a fixed cache has room for ``limit`` from the start
        self.capacity = limit if fixed else min(limit or GROWTH, GROWTH)
        self._kv: Tensor | None = None  # (2, ≥B, H, capacity, Dh): keys, then values
        self._cross: Tensor | None = None  # (2, B, H, S, Dh), set once per source
        # its two halves, (B, H, S, Dh) each: attributes, where properties slicing ``_cross``
        # took three calls into torch per layer and step (docs/speed.md)
        self.cross_keys: Tensor | None = None
        self.cross_values: Tensor | None = None

    @property
    def self_keys(self) -> Tensor | None:
        """(B, H, t, Dh), a view of the buffer."""
        return None if self._kv is None else self._kv[0, : self.rows, :, : self.length]

    @property
    def self_values(self) -> Tensor | None:
        """(B, H, t, Dh), a view of the buffer."""
        return None if self._kv is None else self._kv[1, : self.rows, :, : self.length]

    def set_cross(self, keys: Tensor, values: Tensor) -> None:
        """Stores the encoder-decoder keys and values (B, H, S, Dh), contiguous: otherwise every
        step's Q·Kᵀ would copy them (profiled)."""
        self._set_cross(torch.stack([keys, values]))  # (2, B, H, S, Dh)

    def _set_cross(self, both: Tensor) -> None:
        self._cross = both  # (2, B, H, S, Dh)
        self.cross_keys, self.cross_values = both.unbind()  # (B, H, S, Dh) each

    def append(self, keys: Tensor, values: Tensor) -> tuple[Tensor, Tensor]:
        """Adds the new steps' self-attention keys and values (B, H, T, Dh); returns all of them
        so far, (B, H, t + T, Dh) each (views of the buffer)."""
        B, H, T, Dh = keys.shape
        end = self.length + T
        if self._kv is None or end > self._kv.size(3):
            self._grow(B, H, end, Dh, keys)
        assert self._kv is not None
        self._kv[0, :B, :, self.length : end] = keys
        self._kv[1, :B, :, self.length : end] = values
        self.length, self.rows = end, B
        return self._kv[0, :B, :, :end], self._kv[1, :B, :, :end]

    def _grow(self, rows: int, heads: int, needed: int, d_head: int, like: Tensor) -> None:
        """A buffer with room for at least ``needed`` positions (when the old room was too
        small, ``GROWTH`` or a quarter more, whichever is more, in whole ``GROWTH`` steps:
        8, 16, 24, 32, 40, 56, 72, 96, 120, ...), holding what the old one held."""
        if self._kv is not None:
            room = max(needed, self.capacity + max(GROWTH, self.capacity // 4))
            self.capacity = -(-room // GROWTH) * GROWTH
            if self.limit:
                self.capacity = max(needed, min(self.capacity, self.limit))
        shape = (2, max(rows, self.rows), heads, max(self.capacity, needed), d_head)
        grown = self._buffer(like, shape)
        if self._kv is not None:
            grown[:, : self.rows, :, : self.length] = self._kv[:, : self.rows, :, : self.length]
        self._kv = grown

    def select(
        self, index: Tensor, sentences: Tensor | None, spare: Tensor | None
    ) -> Tensor | None:
        """Keeps rows ``index`` of the batch (beam reordering; dropping finished sentences),
        and the encoder-decoder rows ``sentences`` (None: all, as they are).

        The self-attention rows are gathered into ``spare`` (a buffer of the same shape, or
        None: a new one), which becomes this layer's; the old buffer is returned, to be the
        next layer's spare. Where at most half the buffer's rows stay, they are gathered into
        a new buffer of their number instead, and None is returned: the big buffers go."""
        old = self._kv
        if old is not None:
            n = index.numel()
            shrink = 2 * n <= old.size(1)
            if shrink or spare is None or spare.shape[2:] != old.shape[2:] or spare.size(1) < n:
                spare = self._buffer(old, (2, n if shrink else max(n, old.size(1)), *old.shape[2:]))
            used = old[:, : self.rows, :, : self.length]  # (2, B, H, t, Dh)
            torch.index_select(used, 1, index, out=spare[:, :n, :, : self.length])
            self._kv, self.rows = spare, n
            if shrink:
                old = None
        if sentences is not None and self._cross is not None:
            self._set_cross(self._cross.index_select(1, sentences))
        return old

    def _buffer(self, like: Tensor, shape: tuple[int, ...]) -> Tensor:
        """A new buffer of ``shape``. A growing cache's attention reads only the first
        ``length`` positions of its first ``rows`` rows, each written before it is read, so the
        rest need not be zeroed: writing zeros took 4.5% of a beam search (profiled), and
        touched every page of the room ahead. A fixed cache's step attends to every slot, the
        empty ones with weight 0, which must multiply finite numbers: zeros."""
        return like.new_zeros(shape) if self.fixed else like.new_empty(shape)

    def allocate(self, rows: int, heads: int, d_head: int, like: Tensor) -> None:
        """A fixed cache's buffer, zeros for ``rows`` rows, made before the first compiled
        step (which cannot grow one); ``like``: its dtype and device."""
        if self._kv is None:
            self._grow(rows, heads, self.capacity, d_head, like)
            self.rows = rows

    def fixed_slots(self, position: Tensor) -> FixedSlots:
        """This layer's buffers as a compiled step sees them (a fixed cache whose buffer and
        encoder-decoder keys and values exist: ``allocate`` and ``set_cross``, which
        inference/compiled.py calls before the first step)."""
        assert self._kv is not None and self.cross_keys is not None
        assert self.cross_values is not None
        kv = self._kv[:, : self.rows]  # (2, B, H, capacity, Dh)
        return FixedSlots(kv[0], kv[1], self.cross_keys, self.cross_values, position)


class FixedSlots:
    """One layer's cache inside a compiled decoding step: every slot of a fixed-size buffer,
    the new position's keys and values written in place at ``position`` (1,)."""

    def __init__(
        self, keys: Tensor, values: Tensor, cross_keys: Tensor, cross_values: Tensor,
        position: Tensor,
    ) -> None:  # fmt: skip
        self.keys, self.values = keys, values  # (B, H, capacity, Dh) each
        self.cross_keys, self.cross_values = cross_keys, cross_values  # (B, H, S, Dh) each
        self.position = position  # (1,)

    def append(self, keys: Tensor, values: Tensor) -> tuple[Tensor, Tensor]:
        """Writes the new position's keys and values (B, H, 1, Dh); returns every slot,
        (B, H, capacity, Dh) each."""
        self.keys.index_copy_(2, self.position, keys)
        self.values.index_copy_(2, self.position, values)
        return self.keys, self.values


@dataclass
class FixedStep:
    """A fixed cache as one compiled decoding step sees it: the new token's position as a
    tensor, so that the step's code is the same at every position."""

    layers: list[FixedSlots]
    length: Tensor  # (1,): positions already decoded, i.e. the new one's position

    def step_mask(self, new: int, device: torch.device) -> Tensor:
        """The new position sees the filled slots: (1, 1, 1, capacity)."""
        assert new == 1, "a compiled step decodes one position"
        return filled_slots_mask(self.length, self.layers[0].keys.size(2))


@dataclass
class DecoderCache:
    """One ``LayerCache`` per decoder layer, plus how many target steps they hold."""

    layers: list[LayerCache] = field(default_factory=list)
    # A buffer of a layer's shape that the rows are gathered into. Shared by the layers: each
    # gathers into it and hands on its old buffer, so the cache takes one layer's buffer more
    # memory, not twice as much.
    _spare: Tensor | None = None
    # the encoder-decoder mask last seen and its ``Blocked``, which every layer's step uses
    _source: tuple[Tensor, Blocked] | None = None

    @classmethod
    def empty(cls, n_layers: int, length: int = 0, fixed: bool = False) -> DecoderCache:
        """``n_layers`` empty caches for up to ``length`` positions (0: not known); ``fixed``:
        room for all ``length`` from the start, for a compiled step."""
        return cls([LayerCache(length, fixed) for _ in range(n_layers)])

    @property
    def length(self) -> int:
        """Number of target positions already decoded (the offset of the next one)."""
        return self.layers[0].length if self.layers else 0

    def step_mask(self, new: int, device: torch.device) -> Tensor | None:
        """The self-attention mask of ``new`` positions after the cached ones: none for one
        (it may see every cached one), the look-ahead mask (1, 1, new, t + new) for more."""
        return None if new == 1 else look_ahead_mask(new, self.length, device)

    def blocked(self, memory_mask: Tensor) -> Blocked:
        """The encoder-decoder attention's ``Blocked`` keys for ``memory_mask`` (B, 1, 1, S):
        made when the mask is a new one (a new batch, or sentences left), else the one made
        then, so that a step does not make it in every layer."""
        if self._source is None or self._source[0] is not memory_mask:
            self._source = memory_mask, Blocked.of(memory_mask)
        return self._source[1]

    def fixed_step(self) -> FixedStep:
        """What one compiled step reads and writes; ``advance`` afterwards."""
        cross = self.layers[0].cross_keys
        assert cross is not None
        position = torch.tensor([self.length], device=cross.device)  # (1,)
        return FixedStep([layer.fixed_slots(position) for layer in self.layers], position)

    def advance(self) -> None:
        """A compiled step has written one more position into every layer."""
        for layer in self.layers:
            layer.length += 1

    def reorder(self, index: Tensor) -> None:
        """Beam search: row i of the new batch continues hypothesis ``index[i]``.

        Only the self-attention entries move; the encoder-decoder ones are the same for every
        beam of a sentence, so they stay as they are.
        """
        self._select(index, None)

    def keep(self, index: Tensor, sentences: Tensor) -> None:
        """Keeps only the batch rows ``index`` (e.g. the sentences that are not finished), and
        the encoder-decoder entries ``sentences`` (one per row, or one per sentence when the
        beams of a sentence share them)."""
        self._select(index, sentences)

    def _select(self, index: Tensor, sentences: Tensor | None) -> None:
        for layer in self.layers:
            self._spare = layer.select(index, sentences, self._spare)
