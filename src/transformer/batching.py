"""Token batching: sentences of similar length together, at most ``max_tokens`` per batch.

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

from dataclasses import dataclass

import torch
from torch import Tensor

from .config import BOS_ID, EOS_ID, PAD_ID
from .errors import UserError


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

    @property
    def n_padded(self) -> int:
        """Source + target positions including padding: what ``max_tokens`` bounds."""
        return self.src.numel() + self.tgt_in.numel()


def encode_source(ids: list[int]) -> list[int]:
    """Source ids as the model reads them: the pieces, then EOS."""
    return [*ids, EOS_ID]


def make_batches(
    examples: list[Example], max_tokens: int, seed: int, epoch: int, shuffle: bool = True
) -> list[list[int]]:
    """Groups example indices into batches of at most ``max_tokens`` padded positions.

    Args:
        examples: the whole split.
        max_tokens: bound on B·(S + T) for each batch.
        seed, epoch: seed the shuffle; the same pair always gives the same batches.
        shuffle: False for validation (sorted by length, fixed order).
    Returns:
        lists of indices into ``examples``, one list per batch.
    """
    generator = torch.Generator().manual_seed(seed * 100_003 + epoch)
    tie_break = torch.randperm(len(examples), generator=generator).tolist() if shuffle else None
    order = sorted(
        range(len(examples)),
        key=lambda i: (*examples[i].cost, tie_break[i] if tie_break else i),
    )
    batches: list[list[int]] = []
    current: list[int] = []
    max_src = max_tgt = 0
    for i in order:
        src_len, tgt_len = examples[i].cost
        if src_len + tgt_len > max_tokens:
            raise UserError(
                f"a sentence pair of {src_len}+{tgt_len} tokens does not fit in "
                f"train.max_tokens={max_tokens}; raise max_tokens or lower data.max_len"
            )
        new_src, new_tgt = max(max_src, src_len), max(max_tgt, tgt_len)
        if current and (len(current) + 1) * (new_src + new_tgt) > max_tokens:
            batches.append(current)
            current, new_src, new_tgt = [], src_len, tgt_len
        current.append(i)
        max_src, max_tgt = new_src, new_tgt
    if current:
        batches.append(current)
    if shuffle:
        perm = torch.randperm(len(batches), generator=generator).tolist()
        batches = [batches[j] for j in perm]
    return batches


def collate(examples: list[Example]) -> Batch:
    """Pads a list of pairs to the longest in the batch (padded per batch only)."""
    B = len(examples)
    S = max(len(e.src) for e in examples)
    T = max(len(e.tgt) for e in examples) + 1
    src = torch.full((B, S), PAD_ID, dtype=torch.long)
    tgt_in = torch.full((B, T), PAD_ID, dtype=torch.long)
    tgt_out = torch.full((B, T), PAD_ID, dtype=torch.long)
    for row, e in enumerate(examples):
        src[row, : len(e.src)] = torch.tensor(e.src)
        tgt_in[row, : len(e.tgt) + 1] = torch.tensor([BOS_ID, *e.tgt])  # shifted right
        tgt_out[row, : len(e.tgt) + 1] = torch.tensor([*e.tgt, EOS_ID])
    return Batch(src, tgt_in, tgt_out)
