"""Train / valid / test: the splits of one run, and how a single corpus is dealt into them."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

import numpy as np

from ..errors import UserError
from .readers import Pair


def normalised(sentence: str) -> str:
    """A sentence lowercased, its spaces collapsed: what counts as "the same source"."""
    return " ".join(sentence.lower().split())


def split_key(pair: Pair, seed: int, by_source: bool = False) -> int:
    """The pair's rank: of its two sides in sorted order, so that both directions split alike,
    or with ``by_source`` of its normalised source alone, so that every translation of a source
    lands in the same split (a corpus with several translations per sentence)."""
    text = normalised(pair[0]) if by_source else "\t".join(sorted(pair))
    digest = hashlib.blake2b(f"{seed}\n{text}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


@dataclass(frozen=True)
class SplitPlan:
    """Which split a pair goes to, by its key: valid up to ``valid_last``, then test up to
    ``test_last``, then train (-1: an empty split)."""

    seed: int
    valid_last: int
    test_last: int
    by_source: bool = False

    def split_of(self, pair: Pair) -> int:
        """0 train, 1 valid, 2 test."""
        key = split_key(pair, self.seed, self.by_source)
        return 1 if key <= self.valid_last else 2 if key <= self.test_last else 0


def plan_split(
    pairs: Iterable[Pair], valid_fraction: float, test_fraction: float, seed: int,
    by_source: bool = False,
) -> SplitPlan:  # fmt: skip
    """The split of a corpus, from one pass over its pairs keeping 8 bytes per pair.

    Each distinct pair is ranked by a BLAKE2 hash of (seed, pair): the same split on every run,
    machine and Python version, whatever the order of the file or the direction. The first
    ``round(valid_fraction · distinct)`` go to valid (at least one if the fraction is > 0), the
    next to test, the rest to train. All copies of a repeated pair land in the same split, so a
    pair is never both trained on and validated on. With ``by_source`` the distinct normalised
    sources are ranked instead: no valid or test source appears in training, even with another
    translation, and a held-out source keeps all its translations (references).

    Args:
        pairs: all the pairs (any iterable: the corpus can be streamed).
        valid_fraction: share of distinct pairs (or sources) held out for validation.
        test_fraction: share held out for testing.
        seed: the split seed.
        by_source: rank distinct sources, not distinct pairs.
    """
    keys = np.fromiter((split_key(p, seed, by_source) for p in pairs), dtype=np.uint64)
    keys = np.unique(keys)
    n_valid, n_test = (
        max(1, round(f * len(keys))) if f > 0 else 0 for f in (valid_fraction, test_fraction)
    )
    if n_valid + n_test >= len(keys):
        raise UserError(
            f"{len(keys)} distinct {'sources' if by_source else 'pairs'} are too few to hold out "
            f"valid_fraction="
            f"{valid_fraction} and test_fraction={test_fraction} and keep pairs for training"
        )
    valid_last = int(keys[n_valid - 1]) if n_valid else -1
    test_last = int(keys[n_valid + n_test - 1]) if n_test else valid_last
    return SplitPlan(seed, valid_last, test_last, by_source)


def split_pairs(
    pairs: list[Pair], valid_fraction: float, test_fraction: float, seed: int,
    by_source: bool = False,
) -> tuple[list[Pair], list[Pair], list[Pair]]:  # fmt: skip
    """Deals pairs into (train, valid, test) by ``plan_split``; each keeps the order of the file.

    Args: as ``plan_split``.
    """
    plan = plan_split(pairs, valid_fraction, test_fraction, seed, by_source)
    splits: tuple[list[Pair], list[Pair], list[Pair]] = ([], [], [])
    for pair in pairs:
        splits[plan.split_of(pair)].append(pair)
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


class PairStream:
    """Pairs read again from their source each time they are iterated (a corpus of any size in
    bounded memory): stripped, without those with an empty side (``skipped`` counts them once a
    pass is complete), and only those ``keep`` admits."""

    def __init__(
        self, make: Callable[[], Iterable[Pair]], keep: Callable[[Pair], bool] | None = None
    ) -> None:
        self.make, self.keep = make, keep
        self.skipped = 0

    def __iter__(self) -> Iterator[Pair]:
        skipped = 0
        for src, tgt in self.make():
            src, tgt = src.strip(), tgt.strip()
            if not (src and tgt):
                skipped += 1
            elif self.keep is None or self.keep((src, tgt)):
                yield src, tgt
        self.skipped = skipped


@dataclass
class SplitStreams:
    """The splits of one run with the training pairs as a stream; valid and test are small."""

    train: PairStream
    valid: list[Pair]
    test: list[Pair]
    source: str
    skipped_empty: int = 0  # empty pairs in valid / test files (the train stream counts its own)
    test_groups: list[str] | None = None
    test_note: str = ""

    def materialize(self) -> Splits:
        """The splits as lists (what evaluation and small corpora use)."""
        train = list(self.train)
        skipped = self.skipped_empty + self.train.skipped
        return Splits(train, self.valid, self.test, skipped, self.source, self.test_groups,
                      self.test_note)  # fmt: skip


def split_stream(
    make: Callable[[], Iterable[Pair]], valid_fraction: float, test_fraction: float, seed: int,
    by_source: bool = False,
) -> tuple[PairStream, list[Pair], list[Pair]]:  # fmt: skip
    """One source dealt into (train stream, valid, test) by ``plan_split``: one pass to plan,
    one to collect valid and test; training reads the source again (and counts the empty pairs
    of the whole source, which belong to no split)."""
    plan = plan_split(PairStream(make), valid_fraction, test_fraction, seed, by_source)
    held: tuple[list[Pair], list[Pair], list[Pair]] = ([], [], [])
    for pair in PairStream(make, lambda pair: plan.split_of(pair) != 0):
        held[plan.split_of(pair)].append(pair)
    train = PairStream(make, lambda pair: plan.split_of(pair) == 0)
    return train, held[1], held[2]
