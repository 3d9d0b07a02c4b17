"""Documents: paragraphs split into sentences for a model trained on sentences, and put back.

A document is text whose paragraphs are separated by blank lines (lines of whitespace only).
Each paragraph is split into sentences by pysbd (Sadvilkar & Neumann 2020), chosen by measure:
on Multi30k and Tatoeba sentences joined into paragraphs it missed 106 boundaries and added 28,
sentencex 113 and 35 (``benchmarks/results/segmenters.md``). A line break inside a paragraph is
read as a space (a hard-wrapped sentence stays one sentence).

Only the sentences change: everything around them (a paragraph's leading whitespace, the
spaces and line breaks between sentences, the blank lines between paragraphs) comes back
exactly as given, and the sentences come back in order (``Document.assemble``). Inside a
sentence, runs of whitespace reach the model as one space.

A sentence longer than the model accepts (``max_positions`` pieces, with </s>) is never cut:
``fit`` splits it at punctuation (after , ; : and dashes), or where there is none, into
windows of whole words (of characters for a word longer than the model's window), each
translated on its own and joined with a space.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache

# Languages pysbd has rules for; any other is split with the English rules (full stops, question
# and exclamation marks, abbreviations such as "Mr.").
_PYSBD_LANGUAGES = {"am", "ar", "bg", "da", "de", "el", "en", "es", "fa", "fr", "hi", "hy", "it",
                    "ja", "kk", "mr", "my", "nl", "pl", "ru", "sk", "ur", "zh"}  # fmt: skip
_CLAUSE_END = re.compile(r"(?<=[,;:\u2013\u2014])\s+")  # where a clause ends: , ; : – —


@dataclass
class Sentence:
    start: int  # where it starts in the document's text (its first non-space character)
    end: int  # where it ends (after its last non-space character)
    line: int  # the input line it starts on, from 1
    text: str  # what the model reads: its whitespace runs made one space


@dataclass
class Paragraph:
    start: int  # its first non-space character in the document's text
    end: int
    line: int  # the input line it starts on, from 1
    sentences: list[Sentence] = field(default_factory=list)


@dataclass
class Document:
    text: str
    paragraphs: list[Paragraph]

    @property
    def sentences(self) -> list[Sentence]:
        return [s for p in self.paragraphs for s in p.sentences]

    def assemble(self, translations: list[str]) -> str:
        """The document with its sentences (in order) replaced by ``translations``; every
        character outside a sentence stays as given."""
        return _replaced(self.text, self.sentences, translations)

    def paragraph_text(self, paragraph: Paragraph, translations: list[str]) -> str:
        """One paragraph, from its first character to its last, with its sentences replaced by
        ``translations`` (one per sentence of that paragraph)."""
        shifted = [Sentence(s.start - paragraph.start, s.end - paragraph.start, s.line, s.text)
                   for s in paragraph.sentences]  # fmt: skip
        return _replaced(self.text[paragraph.start : paragraph.end], shifted, translations)


def _replaced(text: str, sentences: list[Sentence], translations: list[str]) -> str:
    if len(translations) != len(sentences):
        raise ValueError(f"{len(translations)} translations for {len(sentences)} sentences")
    out, at = [], 0
    for sentence, translation in zip(sentences, translations, strict=True):
        out += [text[at : sentence.start], translation]
        at = sentence.end
    return "".join([*out, text[at:]])


@cache
def _segmenter(language: str):
    import pysbd

    return pysbd.Segmenter(language=language if language in _PYSBD_LANGUAGES else "en",
                           clean=False)  # fmt: skip


def split_sentences(text: str, language: str) -> list[tuple[int, int]]:
    """(start, end) of each sentence of one paragraph, in order, without surrounding spaces;
    together they hold every non-space character of ``text``. A sentence ends only where
    whitespace follows: pysbd also cuts inside "example.com/a.b?c=d" and "Hi!!!Yes.", and
    translations put back with nothing between them would run together as one word."""
    flat = text.replace("\n", " ")  # offsets stay the same
    spans: list[tuple[int, int]] = []
    at = 0
    # pysbd's sentences, found in the text one after the other. ``Segmenter.segment`` searched
    # for each from the text's start and went through every earlier match: a paragraph of
    # 8,000 sentences "Twelve." took 8.4 s, 100,000 more than 5 minutes.
    for sentence in _segmenter(language).processor(flat).process():
        core = sentence.strip()
        start = flat.find(core, at) if core else at
        if start < 0 or flat[at:start].strip():  # never lose a character if pysbd ever does
            return _whole(flat)
        if not core:
            continue
        if spans and spans[-1][1] == start:  # no space between: the same sentence
            spans[-1] = (spans[-1][0], start + len(core))
        else:
            spans.append((start, start + len(core)))
        at = start + len(core)
    return _whole(flat) if flat[at:].strip() else spans


def _whole(text: str) -> list[tuple[int, int]]:
    """The paragraph as one sentence, without its surrounding spaces (none if it is blank)."""
    start = len(text) - len(text.lstrip())
    return [(start, len(text.rstrip()))] if text.strip() else []


def read_document(text: str, language: str) -> Document:
    """Paragraphs (separated by blank lines) and their sentences, with where each starts.

    Args:
        text: the whole document; lines end with "\\n".
        language: the source language's code (e.g. "en"), for the segmenter's rules.
    """
    paragraphs = []
    lines = _LineCounter(text)
    for start, end in _blocks(text):
        block = text[start:end]
        first = start + len(block) - len(block.lstrip())
        last = start + len(block.rstrip())
        paragraph = Paragraph(first, last, lines.at(first))
        for a, b in split_sentences(text[first:last], language):
            words = " ".join(text[first + a : first + b].split())
            paragraph.sentences.append(Sentence(first + a, first + b, lines.at(first + a), words))
        paragraphs.append(paragraph)
    return Document(text, paragraphs)


class _LineCounter:
    """The line (from 1) of positions in ``text`` asked for in increasing order, counting the
    line breaks since the last one asked for (from the start each time was quadratic)."""

    def __init__(self, text: str) -> None:
        self.text, self.line, self.position = text, 1, 0

    def at(self, position: int) -> int:
        self.line += self.text.count("\n", self.position, position)
        self.position = position
        return self.line


def _blocks(text: str) -> list[tuple[int, int]]:
    """(start, end) of each run of lines (split at "\\n") that are not blank."""
    blocks, at, start = [], 0, None
    for line in text.split("\n"):
        if line.strip() and start is None:
            start = at
        elif not line.strip() and start is not None:
            blocks.append((start, at))
            start = None
        at += len(line) + 1
    if start is not None:
        blocks.append((start, len(text)))
    return blocks


@dataclass
class Fitted:
    parts: list[str]  # the sentence, or the parts it was split into
    how: str = ""  # "" (it fitted), "at punctuation" or "at a fixed window"
    pieces: int = 0  # its length in pieces with </s>, when split


def fit(
    sentence: str, pieces: Callable[[str], int], limit: int, whole: re.Pattern[str] | None = None
) -> Fitted:
    """``sentence`` whole if ``pieces(sentence)`` (its length, </s> counted) is at most
    ``limit``; else split into parts that fit: at the ends of clauses, then into windows of
    whole words, then of characters. Nothing is dropped: the parts hold every word.

    ``whole``: what a window keeps in one part, as a unit of words (a glossary's source terms:
    a term the split went through was in no part, so no search was given it)."""
    length = pieces(sentence)
    if length <= limit:
        return Fitted([sentence])
    clauses = _CLAUSE_END.split(sentence)
    if len(clauses) > 1:
        parts = [p for clause in _packed(clauses, pieces, limit)
                 for p in _windows(clause, pieces, limit, whole)]  # fmt: skip
        how = "at punctuation"
        if len(parts) > len(_packed(clauses, pieces, limit)):
            how = "at punctuation and at a fixed window"
        return Fitted(parts, how, length)
    return Fitted(_windows(sentence, pieces, limit, whole), "at a fixed window", length)


def _units(text: str, whole: re.Pattern[str] | None) -> list[str]:
    """The words of ``text``, those of each ``whole`` match joined into one unit (with the
    words it starts or ends inside of)."""
    spans = [m.span() for m in re.finditer(r"\S+", text)]  # (start, end) of each word
    for match in whole.finditer(text) if whole is not None else ():
        inside = [i for i, (start, end) in enumerate(spans) if start < match.end() and
                  end > match.start()]  # fmt: skip
        if len(inside) > 1:
            first, last = inside[0], inside[-1]
            spans[first : last + 1] = [(spans[first][0], spans[last][1])]
    return [text[start:end] for start, end in spans]


def _packed(units: list[str], pieces: Callable[[str], int], limit: int) -> list[str]:
    """Consecutive ``units`` joined with spaces into as few parts as fit (a unit that does not
    fit alone is a part of its own)."""
    parts: list[str] = []
    for unit in units:
        if parts and pieces(f"{parts[-1]} {unit}") <= limit:
            parts[-1] = f"{parts[-1]} {unit}"
        else:
            parts.append(unit)
    return parts


def _windows(
    text: str, pieces: Callable[[str], int], limit: int, whole: re.Pattern[str] | None
) -> list[str]:
    """``text`` in windows of whole words that fit, the words of a ``whole`` match kept
    together; a word (or match) that alone does not fit, in windows of characters."""
    if pieces(text) <= limit:
        return [text]
    out = []
    for part in _packed(_units(text, whole), pieces, limit):
        if pieces(part) <= limit:
            out.append(part)
            continue
        while part:  # one word too long for the model: the longest prefix that fits, each time
            low, high = 1, len(part)
            while low < high:
                middle = (low + high + 1) // 2
                low, high = (middle, high) if pieces(part[:middle]) <= limit else (low, middle - 1)
            out.append(part[:low])
            part = part[low:]
    return out
