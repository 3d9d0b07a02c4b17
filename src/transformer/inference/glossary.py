"""A glossary: terms a translation must use. ``translate --glossary FILE.tsv``, ``glossary=`` in
Python, ``"glossary"`` over HTTP.

The file holds one term a line, ``source<TAB>target`` in UTF-8; blank lines are skipped. For
every sentence whose source contains a listed source term (on word boundaries, case as
written), the translation must contain the target term, once per occurrence of the source
term; ``constrained_beam.py`` searches for such translations. Where source terms overlap, the
longest is matched first ("seventy-seven" before "seventy").

Refused, each in one line naming the file (or the request's ``glossary.i``) and the line: a
missing or binary file, a line without a tab or with more than one, an empty term, a source
term listed twice, and, once the model is known (``check``), a term with more pieces than the
model's positions hold or a target term the target vocabulary cannot spell.
"""

from __future__ import annotations

import io
import re
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from ..data.readers import decoded_lines
from ..data.tokenizer import Tokenizers
from ..errors import UserError
from ..reading import read_bytes
from ..vocab import UNK_ID
from .inputs import check_texts

MAX_BYTES = 16 * 2**20  # a terminology list of 100,000 entries is about 4 MB
NO_CONSTRAINED_SEARCH = ("the ctranslate2 engine has no constrained search, so it cannot "
                         "enforce a glossary; use --engine torch")  # fmt: skip


@dataclass(frozen=True)
class Term:
    source: str
    target: str
    where: str  # how messages name it: "terms.tsv: line 3", "glossary.2"


@dataclass(frozen=True)
class Glossary:
    """Source terms and the target terms that must translate them."""

    terms: tuple[Term, ...]

    @classmethod
    def read(cls, path: str | Path) -> Glossary:
        """The glossary in a ``source<TAB>target`` file, checked (the module's docstring)."""
        data = read_bytes(path, MAX_BYTES)
        entries = []
        # the rules of every reader of lines: UTF-8, no NUL, no carriage return inside a line
        for number, line in enumerate(decoded_lines(io.BytesIO(data), str(path)), 1):
            where = f"{path}: line {number}"
            if not line.strip():
                continue
            columns = line.split("\t")
            if len(columns) != 2:
                found = "no tab" if len(columns) == 1 else f"{len(columns) - 1} tabs"
                raise UserError(f"{where} has {found}; a glossary line is source<TAB>target")
            entries.append((columns[0], columns[1], where))
        if not entries:
            raise UserError(f"{path} holds no terms; a glossary line is source<TAB>target")
        return cls._checked(entries)

    @classmethod
    def of(cls, pairs: Iterable[Iterable[str]], origin: str = "glossary") -> Glossary:
        """The glossary of (source, target) pairs given in Python or over HTTP; pair i is named
        ``origin.i`` in messages."""
        entries = []
        for i, pair in enumerate(pairs):
            pair = () if isinstance(pair, (str, bytes)) else tuple(pair)  # "ab" is no pair
            if len(pair) != 2 or not all(isinstance(side, str) for side in pair):
                raise UserError(f"{origin}.{i}: a term is a pair of strings [source, target]")
            check_texts(pair, f"{origin}.{i}")  # no lone surrogate
            entries.append((pair[0], pair[1], f"{origin}.{i}"))
        return cls._checked(entries)

    @classmethod
    def _checked(cls, entries: list[tuple[str, str, str]]) -> Glossary:
        """Terms stripped; an empty one, or a source term given twice, is refused."""
        terms, seen = [], {}
        for source, target, where in entries:
            source, target = source.strip(), target.strip()
            for side, text in (("source", source), ("target", target)):
                if not text:
                    raise UserError(f"{where}: the {side} term is empty")
            if source in seen:
                raise UserError(f"{where}: the source term {source!r} is already listed "
                                f"({seen[source]})")  # fmt: skip
            seen[source] = where
            terms.append(Term(source, target, where))
        return cls(tuple(terms))

    def check(self, tokenizers: Tokenizers, max_positions: int) -> None:
        """Every term fits the model: at most ``max_positions - 1`` pieces a side (room for
        </s>), and a target term the target vocabulary spells without the unknown piece."""
        room = max_positions - 1
        for term in self.terms:
            for side, text, tokenizer in (("source", term.source, tokenizers.src),
                                          ("target", term.target, tokenizers.tgt)):  # fmt: skip
                pieces = len(tokenizer.encode(text))
                if pieces > room:
                    raise UserError(f"{term.where}: the {side} term has {pieces} pieces; "
                                    f"the model's sentences hold at most {room}")  # fmt: skip
            if UNK_ID in tokenizers.tgt.encode(term.target):
                raise UserError(f"{term.where}: the target vocabulary cannot spell "
                                f"{term.target!r}: it holds characters never seen")  # fmt: skip

    @cached_property
    def pattern(self) -> re.Pattern[str]:
        """Any source term on word boundaries, the longest first."""
        sources = sorted((term.source for term in self.terms), key=len, reverse=True)
        return re.compile(r"(?<!\w)(?:" + "|".join(map(re.escape, sources)) + r")(?!\w)")

    @cached_property
    def _targets(self) -> dict[str, str]:
        return {term.source: term.target for term in self.terms}

    def targets_in(self, sentence: str) -> list[str]:
        """The target terms ``sentence``'s translation must contain: one per occurrence of a
        source term, in the order they occur."""
        return [self._targets[found.group()] for found in self.pattern.finditer(sentence)]


def glossary_of(value: Glossary | Iterable[Iterable[str]] | None) -> Glossary | None:
    """A ``Glossary`` from what Python callers may give: one, a list of (source, target) pairs,
    or None (an empty list is None too)."""
    if value is None or isinstance(value, Glossary):
        return value
    if isinstance(value, (str, bytes, Path)):  # a file's name: its characters are no pairs
        raise TypeError(f"glossary must be a Glossary (Glossary.read(path) for a file) or "
                        f"(source, target) pairs, got {type(value).__name__}")  # fmt: skip
    pairs = list(value)
    return Glossary.of(pairs) if pairs else None


def count_occurrences(tokens: list[int], term: list[int]) -> int:
    """How many times ``term`` appears, contiguously, in ``tokens`` (overlaps counted, as
    ``TermState`` counts them)."""
    n = len(term)
    return sum(tokens[i : i + n] == term for i in range(len(tokens) - n + 1))
