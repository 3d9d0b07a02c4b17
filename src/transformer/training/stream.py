"""The stream of training batches: one global order, epoch after epoch, from any position.

Every rank reads the same stream (it depends only on the seed and the epoch); the position of
the next batch is saved with each checkpoint, so a resumed run reads on exactly where it was.

Shapes: none; example indices and their padded batches.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from ..data.batching import Batch, Example, collate, make_batches


@dataclass
class Position:
    """Where the data stream is: the next batch is number ``batch`` of epoch ``epoch``."""

    epoch: int = 0
    batch: int = 0


def index_stream(
    examples: Sequence[Example], max_tokens: int, seed: int, start: Position
) -> Iterator[tuple[Position, np.ndarray]]:
    """Yields (position of the next batch, a batch's example indices) forever, epoch after
    epoch, from ``start``: the one global stream of batches every rank reads.

    After the last batch of epoch e the next position is (e + 1, 0): the epoch is complete.
    """
    epoch, first = start.epoch, start.batch
    while True:
        order = make_batches(examples, max_tokens, seed, epoch)
        for i in range(first, len(order)):
            after = Position(epoch, i + 1) if i + 1 < len(order) else Position(epoch + 1, 0)
            yield after, order[i]
        epoch, first = epoch + 1, 0


def batch_stream(
    examples: Sequence[Example], max_tokens: int, seed: int, start: Position
) -> Iterator[tuple[Position, Batch]]:
    """``index_stream`` with each batch padded into tensors."""
    for position, indices in index_stream(examples, max_tokens, seed, start):
        yield position, collate([examples[j] for j in indices])
