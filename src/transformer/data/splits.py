"""Train / valid / test: the splits of one run, and how a single corpus is dealt into them."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from ..errors import UserError
from .readers import Pair


def _split_key(pair: Pair, seed: int) -> bytes:
    """The pair's rank; its sides in sorted order, so that both directions split alike."""
    first, second = sorted(pair)
    return hashlib.blake2b(f"{seed}\n{first}\t{second}".encode(), digest_size=8).digest()


def split_pairs(
    pairs: list[Pair], valid_fraction: float, test_fraction: float, seed: int
) -> tuple[list[Pair], list[Pair], list[Pair]]:
    """Deals pairs into (train, valid, test), reproducibly and without leaks between splits.

    Each distinct pair is ranked by a BLAKE2 hash of (seed, pair): the same split on every run,
    machine and Python version, whatever the order of the file or the direction. The first
    ``round(valid_fraction · distinct)`` go to valid (at least one if the fraction is > 0), the
    next to test, the rest to train. All copies of a repeated pair land in the same split, so a
    pair is never both trained on and validated on. Each split keeps the order of the file.

    Args:
        pairs: all the pairs.
        valid_fraction: share of distinct pairs held out for validation.
        test_fraction: share held out for testing.
        seed: the split seed.
    """
    distinct = sorted(dict.fromkeys(pairs), key=lambda pair: _split_key(pair, seed))
    n_valid, n_test = (
        max(1, round(f * len(distinct))) if f > 0 else 0 for f in (valid_fraction, test_fraction)
    )
    if n_valid + n_test >= len(distinct):
        raise UserError(
            f"{len(distinct)} distinct pairs are too few to hold out valid_fraction="
            f"{valid_fraction} and test_fraction={test_fraction} and keep pairs for training"
        )
    split_of = {pair: 1 for pair in distinct[:n_valid]}
    split_of.update({pair: 2 for pair in distinct[n_valid : n_valid + n_test]})
    splits: tuple[list[Pair], list[Pair], list[Pair]] = ([], [], [])
    for pair in pairs:
        splits[split_of.get(pair, 0)].append(pair)
    return splits


@dataclass
class Splits:
    """The sentence pairs of one run, ready for tokenization.

    ``skipped_empty`` counts the pairs dropped for an empty side (all splits); ``source`` says
    where the pairs came from, for the training log.
    """

    train: list[Pair]
    valid: list[Pair]
    test: list[Pair]
    skipped_empty: int
    source: str
    test_groups: list[str] | None = None  # a class per test pair, to report results by class
    test_note: str = ""  # what the test split is, honestly (e.g. which classes were trained on)
