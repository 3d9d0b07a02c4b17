"""``translate --document``, ``--output_format jsonl`` and ``--flag_below``: the translate job
for documents and structured output (inference/texts.py does the translating).

The whole input is read and checked first (UTF-8, no NUL byte: binary data is refused with the
line it is on), then translated, then written: to a file only once complete
(``files.atomic_write``), so a mistake leaves nothing behind.

- text, lines: one line out per line in (``--flag_below P``: words under P as ``[[word]]``);
- text, ``--document``: the input as one document, its sentences translated in place;
- jsonl, lines: one JSON object per input line: ``line``, ``source``, ``text``, ``score``,
  ``log_prob``, ``words`` (each ``word`` with its ``prob``), ``alignment`` when asked;
- jsonl, ``--document``: one object per paragraph: ``paragraph``, ``line``, ``source``,
  ``text`` and its ``sentences``, each as above (with ``split`` when it was too long).

With ``--markup html`` (or ``xml``) each line, or the document, is marked up: ``source`` and
``text`` have their tags, and ``plain_source`` and ``plain_text`` are what the model read and
wrote (what ``words`` and ``alignment`` count). Markup that cannot be kept is one line naming
the file and the line, before anything is translated.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import IO

from ..data.readers import decoded_lines, read_lines
from ..errors import UserError
from ..files import atomic_write
from .confidence import check_threshold
from .engine import Engine
from .glossary import Glossary
from .jobs import read_prefixes
from .markup import MarkupError, parse_markup
from .texts import SentenceOut, TextsResult, check_options, record, translate_texts

CHUNK = 2000  # lines translated at once without --document (bounded memory)


def translate_texts_file(
    engine: Engine,
    input: str | None,
    output: str | Path | None,
    stdin: IO[bytes] | None,
    stdout: IO[str] | None,
    warn: Callable[[str], None],
    document: bool,
    jsonl: bool,
    flag_below: float | None,
    prefix: str | None = None,
    markup: str = "text",
    glossary: Glossary | None = None,
) -> int:
    """Translates ``input`` (or ``stdin``) into ``output`` (or ``stdout``) as the module
    docstring says; returns the number of input lines. ``glossary``: terms every sentence's
    translation must use, checked against the model before any line is read."""
    if flag_below is not None:
        check_threshold(flag_below)
    if glossary is not None:
        glossary.check(engine.tokenizers, engine.config.model.max_positions)
    check_options(engine.decode, document, jsonl, flag_below is not None, markup)
    if document and prefix is not None:
        raise UserError("--prefix goes with lines; a document's sentences are found by the "
                        "segmenter (leave out --prefix or --document)")  # fmt: skip
    lines = text_lines(input, stdin)
    prefixes = None
    if prefix is not None:  # each line checked against the model, named by the file's line
        prefixes = read_prefixes(engine, prefix, len(lines), input or "standard input")
    name = input or "<stdin>"
    if markup != "text" and not document:  # every line checked before any is translated
        for number, line in enumerate(lines, 1):
            _checked(name, number - 1, parse_markup, line, markup)
    out: list[str] = []
    confidence = jsonl or flag_below is not None
    if document:
        found = _checked(name, 0, translate_texts, engine, ["\n".join(lines)], None, True,
                         confidence, flag_below, None, markup, glossary)  # fmt: skip
        _warn_splits(found, engine.config.model.max_positions, warn)
        _warn_missing(found.texts[0].sentences, 0, warn)
        out = _document_lines(found, jsonl)
    for start in range(0, 0 if document else len(lines), CHUNK):
        chunk = lines[start : start + CHUNK]
        forced = prefixes[start : start + CHUNK] if prefixes is not None else None
        found = translate_texts(engine, chunk, None, False, confidence, flag_below, forced, markup,
                                glossary)  # fmt: skip
        for i, t in enumerate(found.texts):
            if t.truncated:
                warn(f"line {start + i + 1}: longer than the model accepts; translated its "
                     "beginning")  # fmt: skip
            _warn_missing(t.sentences, start + i, warn)
            out.append(_json({"line": start + i + 1, **record(t)}) if jsonl else t.text)
    text = "".join(line + "\n" for line in out)
    if output is None:
        assert stdout is not None, "standard_streams gives stdout when there is no output file"
        stdout.write(text)
    else:
        with atomic_write(output) as f:
            f.write(text)
    return len(lines)


def _checked(name: str, before: int, function: Callable, *args: object):
    """``function(*args)``, its ``MarkupError`` as one line naming the file and the line
    (``before``: the lines of the file before the text)."""
    try:
        return function(*args)
    except MarkupError as error:
        raise UserError(f"{name}: line {before + error.line}: {error.reason}") from None


def text_lines(input: str | None, stdin: IO[bytes] | None) -> list[str]:
    """The input's lines, read as every text file is (``readers.decoded_lines``)."""
    if input is not None:
        return read_lines(input)
    assert stdin is not None, "standard_streams gives stdin when there is no input file"
    return list(decoded_lines(stdin, "<stdin>"))


def _document_lines(found: TextsResult, jsonl: bool) -> list[str]:
    translated = found.texts[0]
    if not jsonl:
        return [translated.text]
    paragraphs = record(translated)["paragraphs"]
    return [_json({"paragraph": k, **p}) for k, p in enumerate(paragraphs, 1)]


def _warn_splits(found: TextsResult, limit: int, warn: Callable[[str], None]) -> None:
    for s in found.splits:
        warn(f"line {s.line}: a sentence of {s.pieces} pieces is longer than the model accepts "
             f"({limit}); translated in {s.parts} parts, split {s.how}")  # fmt: skip


def _warn_missing(sentences: list[SentenceOut], before: int, warn: Callable[[str], None]) -> None:
    """A warning for each sentence whose translation lacks a glossary term, left without room or
    cut through by the split of a sentence too long for the model (``before``: the lines
    before its text)."""
    for s in sentences:
        if s.missing_terms:
            terms = ", ".join(repr(term) for term in s.missing_terms)
            warn(f"line {before + s.line}: the translation lacks the glossary's {terms}: the "
                 "length limit left no room, or the sentence was cut to fit the model through "
                 "the term")  # fmt: skip


def _json(value: dict) -> str:
    return json.dumps(value, ensure_ascii=False)
