"""Token batching: sentences of similar length together, at most ``max_tokens`` per batch.

``length_batches`` and ``pad`` are the one home of length-bucketing and padding: training
batches pairs with them, translation batches sources.

Batching by tokens rather than by sentences keeps every batch about the same amount of work
(Vaswani et al. §5.1: "sentence pairs were batched together by approximate sequence length").
Each epoch the order within equal lengths and the order of the batches are shuffled with a
generator seeded by (seed, epoch), so a resumed run sees exactly the batches it would have seen.

Teacher forcing: the decoder reads the target shifted right and predicts it unshifted:
    decoder input   <s>  y1  y2  y3
    decoder output  y1   y2  y3  </s>

Shapes: B batch, S source length, T target length (+1 for BOS or EOS).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from ..device import to_device
from ..errors import UserError
from ..vocab import BOS_ID, EOS_ID, PAD_ID


@dataclass(frozen=True)
class Example:
    """One sentence pair as token ids: source ends with EOS, target has neither BOS nor EOS."""

    src: list[int]
    tgt: list[int]

    @property
    def cost(self) -> tuple[int, int]:
        """Padded lengths this pair needs: (source, decoder input = BOS + target)."""
        return len(self.src), len(self.tgt) + 1


@dataclass
class Batch:
    """Padded tensors for one training step."""

    src: Tensor  # (B, S) source ids, PAD_ID after the end
    tgt_in: Tensor  # (B, T) <s> y1 .. y_n, then PAD_ID
    tgt_out: Tensor  # (B, T) y1 .. y_n </s>, then PAD_ID

    @property
    def n_tokens(self) -> int:
        """Target tokens the loss is computed on (padding excluded)."""
        return int((self.tgt_out != PAD_ID).sum())

    def to(self, device: torch.device) -> Batch:
        """The batch on ``device`` (pinned, non-blocking copies to a GPU)."""
        if device.type == "cpu":
            return self
        return Batch(*(to_device(t, device) for t in (self.src, self.tgt_in, self.tgt_out)))

    @property
    def n_padded(self) -> int:
        """Source + target positions including padding: what ``max_tokens`` bounds."""
        return self.src.numel() + self.tgt_in.numel()


def encode_source(ids: list[int]) -> list[int]:
    """Source ids as the model reads them: the pieces, then EOS."""
    return [*ids, EOS_ID]


def length_batches(
    src_len: Sequence[int],
    tgt_len: Sequence[int] | None,
    order: np.ndarray,
    max_tokens: int,
    max_items: int = 0,
) -> list[np.ndarray]:
    """Cuts items, taken in ``order`` (sorted by length), into consecutive batches.

    A batch's padded size is B · (max S + max T) over its B items (for training pairs; for
    sources to translate ``tgt_len`` is None and it is B · max S); each batch stays within
    ``max_tokens`` and, if ``max_items`` > 0, within ``max_items`` items. An item larger than
    ``max_tokens`` on its own forms a batch alone (callers that cannot allow this check first).

    Args:
        src_len, tgt_len: per item, its lengths (any sequence; numpy arrays for millions).
        order: the item indices in the order to batch them, (n,).
        max_tokens: bound on the padded size of a batch.
        max_items: bound on the items per batch; 0: none.
    Returns:
        arrays of item indices, one per batch (views of ``order``).
    """
    order = np.asarray(order, dtype=np.int64)
    sources = np.asarray(src_len)[order].tolist()  # small ints: no objects, fast to loop over
    targets = np.asarray(tgt_len)[order].tolist() if tgt_len is not None else [0] * len(order)
    cuts: list[int] = []
    start = width_src = width_tgt = 0
    for position, (s, t) in enumerate(zip(sources, targets, strict=True)):
        count = position - start
        new_src, new_tgt = max(width_src, s), max(width_tgt, t)
        full = (max_items and count == max_items) or (count + 1) * (new_src + new_tgt) > max_tokens
        if count and full:
            cuts.append(position)
            start, new_src, new_tgt = position, s, t
        width_src, width_tgt = new_src, new_tgt
    return np.split(order, cuts) if len(order) else []


def pad(sequences: Sequence[Sequence[int]], device: torch.device | None = None) -> Tensor:
    """Right-padded ids (B, L), L the longest sequence (at least 1, so that empty ones work)."""
    width = max(1, *(len(ids) for ids in sequences))
    padded = torch.full((len(sequences), width), PAD_ID, dtype=torch.long)
    for row, ids in enumerate(sequences):
        padded[row, : len(ids)] = torch.tensor(ids, dtype=torch.long)
    return padded.to(device) if device is not None else padded


def example_lengths(examples: Sequence[Example]) -> tuple[np.ndarray, np.ndarray]:
    """(source lengths, decoder-input lengths) of every example, as the batch needs them."""
    if hasattr(examples, "lengths"):  # a binarized dataset: read from its offsets
        return examples.lengths("src"), examples.lengths("tgt") + 1  # type: ignore[attr-defined]
    costs = np.array([e.cost for e in examples], dtype=np.int64).reshape(-1, 2)
    return costs[:, 0], costs[:, 1]


def make_batches(
    examples: Sequence[Example], max_tokens: int, seed: int, epoch: int, shuffle: bool = True
) -> list[np.ndarray]:
    """Groups example indices into batches of at most ``max_tokens`` padded positions.

    Args:
        examples: the whole split (a list, or a binarized ``TokenDataset``).
        max_tokens: bound on B·(S + T) for each batch.
        seed, epoch: seed the shuffle; the same pair always gives the same batches.
        shuffle: False for validation (sorted by length, fixed order).
    Returns:
        arrays of indices into ``examples``, one per batch.
    """
    src_len, tgt_len = example_lengths(examples)
    too_long = np.flatnonzero(src_len + tgt_len > max_tokens)
    if len(too_long):
        i = too_long[0]
        raise UserError(
            f"a sentence pair of {src_len[i]}+{tgt_len[i]} tokens does not fit in "
            f"train.max_tokens={max_tokens}; raise max_tokens or lower data.max_len"
        )
    generator = torch.Generator().manual_seed(seed * 100_003 + epoch)
    n = len(src_len)
    tie_break = torch.randperm(n, generator=generator).numpy() if shuffle else np.arange(n)
    order = np.lexsort((tie_break, tgt_len, src_len))  # by source, then target length
    batches = length_batches(src_len, tgt_len, order, max_tokens)
    if shuffle:
        perm = torch.randperm(len(batches), generator=generator).tolist()
        batches = [batches[j] for j in perm]
    return batches


def collate(examples: list[Example]) -> Batch:
    """Pads a list of pairs to the longest in the batch (padded per batch only)."""
    src = pad([e.src for e in examples])  # (B, S)
    tgt_in = pad([[BOS_ID, *e.tgt] for e in examples])  # (B, T) shifted right
    tgt_out = pad([[*e.tgt, EOS_ID] for e in examples])  # (B, T)
    return Batch(src, tgt_in, tgt_out)
