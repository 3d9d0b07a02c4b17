"""Texts in, structured translations out: lines or documents, with confidence when asked.

``translate_texts(engine, texts, document=True)`` is the Python side of ``translate --document``
and of ``document: true`` over HTTP; the command line and the server use its three steps:

1. ``plan``: each text is one sentence (a line; a marked-up line, one per HTML block on
   it, put back together as one sentence in step 3), or with ``document`` a document
   (documents.py): paragraphs split into sentences, and each sentence too long for the model
   split into parts that fit (``documents.fit``);
2. the engine translates every part of every text in one batched call (``Engine.translate``;
   with a ``glossary``, each part gets the terms its source holds), and with ``confidence``
   scores them (confidence.py);
3. ``put_back``: the parts become sentences again (their translations joined by a space, their
   word alignments shifted to match), the sentences paragraphs, the paragraphs the document
   (``Document.assemble``: order, breaks and leading whitespace as given).

With ``markup`` ("html" or "xml"), each text is marked up: ``plan`` translates its plain text
(markup_segments.py) with word alignments, and ``put_back`` puts the tags back around the
target words (tag_placement.py).

``record`` turns a translated text into the JSON object of ``--output_format jsonl``, which the
server returns too (serve/records.py).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from ..config import DecodeConfig
from ..data.batching import encode_source
from ..errors import UserError
from .alignment import pharaoh
from .confidence import Confidence, Word, check_threshold, confidences, flagged
from .documents import Document, Fitted, fit, read_document
from .glossary import Glossary, glossary_of
from .inputs import check_texts, search_of
from .joined import joined_alignment, joined_confidence, joined_links, split_through
from .markup import MARKUPS, MarkupError
from .markup_segments import Marked, read_marked
from .translation import Translation, TranslationResult


@dataclass
class Split:
    """A sentence too long for the model, translated in parts."""

    text: int  # which text, from 0
    line: int  # its line in that text, from 1
    pieces: int  # its length in pieces, with </s>
    parts: int
    how: str  # "at punctuation", "at a fixed window", or both


@dataclass
class Plan:
    """What to translate: the parts of every sentence of every text, in order."""

    texts: list[str]
    documents: list[Document] | None  # one per text with ``document``, else None
    fitted: list[list[Fitted]]  # per text, per sentence: its parts
    splits: list[Split]
    marked: list[Marked] | None = None  # per text with ``markup``: its segments and tags

    @property
    def parts(self) -> list[str]:
        return [p for sentences in self.fitted for f in sentences for p in f.parts]

    def part_prefixes(self, prefixes: list[str] | None) -> list[str] | None:
        """One target prefix per part, from one per text (lines only): a line's prefix begins
        its first part's translation, and its other parts (a marked-up line's later blocks)
        have none. A marked-up line without text has no block for its prefix to begin: it is
        written as it is, undecoded (a plain empty line with a prefix is decoded from it)."""
        if prefixes is None:
            return None
        counts = [sum(len(f.parts) for f in sentences) for sentences in self.fitted]
        out = [p for prefix, n in zip(prefixes, counts, strict=True)
               for p in [prefix] + [""] * (n - 1)]  # fmt: skip
        if self.marked is not None:
            out = [p if part.strip() else "" for p, part in zip(out, self.parts, strict=True)]
        return out


def plan(
    texts: list[str], document: bool, language: str, pieces: Callable[[str], int], limit: int,
    whole: re.Pattern[str] | None = None,
) -> Plan:  # fmt: skip
    """The sentences of ``texts`` (each a line, or with ``document`` a document), each split
    into parts of at most ``limit`` pieces (``pieces(text)``: its length, </s> counted) when
    it is a document's, never through a ``whole`` match (``fit``). A line is left whole:
    ``translate_with`` cuts it and says so."""
    if not document:
        return Plan(texts, None, [[Fitted([text])] for text in texts], [])
    documents = [read_document(text, language) for text in texts]
    return _fitted(texts, documents, pieces, limit, whole)


def plan_marked(
    texts: list[str], markup: str, document: bool, language: str, pieces: Callable[[str], int],
    limit: int, whole: re.Pattern[str] | None = None,
) -> Plan:  # fmt: skip
    """``plan`` for texts marked up as ``markup``: the sentences are the segments of their plain
    text (markup_segments.py); a ``MarkupError`` names the text and the line."""
    marked = []
    for t, text in enumerate(texts):
        try:
            marked.append(read_marked(text, markup, document, language))
        except MarkupError as error:
            raise MarkupError(error.line, error.reason, t) from None
    if not document:  # a line's segments: one, or one per HTML block on it
        fitted = [[Fitted([s.text]) for s in m.segments] or [Fitted([""])] for m in marked]
        return Plan(texts, None, fitted, [], marked)
    p = _fitted(texts, [m.document() for m in marked], pieces, limit, whole)
    return replace(p, marked=marked)


def _fitted(
    texts: list[str], documents: list[Document], pieces: Callable[[str], int], limit: int,
    whole: re.Pattern[str] | None,
) -> Plan:  # fmt: skip
    fitted, splits = [], []
    for t, doc in enumerate(documents):
        fitted.append([fit(s.text, pieces, limit, whole) for s in doc.sentences])
        for s, f in zip(doc.sentences, fitted[-1], strict=True):
            if f.how:
                splits.append(Split(t, s.line, f.pieces, len(f.parts), f.how))
    return Plan(texts, documents, fitted, splits)


@dataclass
class SentenceOut:
    source: str
    text: str  # its translation ([[flagged]] words marked when asked)
    score: float  # the search's score (split sentences: the sum of their parts')
    line: int = 1  # its line in the text, from 1
    confidence: Confidence | None = None
    alignment: list[tuple[int, int]] | None = None
    split: str = ""  # how it was split to fit the model ("": it was not)
    best_targets: list[tuple[int, int]] | None = None  # for the tags (Translation)
    plain: tuple[str, str] | None = None  # with markup: (source, text) without their tags
    missing_terms: list[str] | None = None  # a glossary's target terms it lacks (no room)


@dataclass
class TextOut:
    text: str  # the text's translation
    sentences: list[SentenceOut]
    paragraphs: list[tuple[int, str, str, list[SentenceOut]]] | None = None  # line, src, tgt
    truncated: bool = False


def put_back(
    p: Plan,
    result: TranslationResult,
    found: list[Confidence] | None = None,
    flag_below: float | None = None,
    alignment: bool = True,
    glossary: Glossary | None = None,
) -> list[TextOut]:
    """The parts' translations (``result``, in ``p.parts``'s order, with their confidences
    ``found`` when scored) as sentences, paragraphs and texts; a marked-up text's with its
    tags put back (and its word alignments kept only with ``alignment``). ``glossary``: the
    one the parts were translated with, for the terms a split went through."""
    best = [options[0] if options else Translation("", 0.0, []) for options in result.nbest]
    truncated = set(result.truncated)
    outs, k = [], 0
    for t in range(len(p.texts)):
        sentences = []
        doc = p.documents[t] if p.documents is not None else None
        first = k
        lines = [s.line for s in doc.sentences] if doc else [1] * len(p.fitted[t])
        sources = [s.text for s in doc.sentences] if doc else [f.parts[0] for f in p.fitted[t]]
        for source, line, f in zip(sources, lines, p.fitted[t], strict=True):
            n = len(f.parts)
            parts = best[k : k + n]
            conf = joined_confidence(found[k : k + n]) if found is not None else None
            missing = [term for i in range(k, k + n) for term in result.unmet.get(i, [])]
            if glossary is not None and n > 1:
                cut = split_through(glossary, source, f.parts, [x.text for x in parts])
                missing += [term for term in cut if term not in missing]
            out = SentenceOut(source, " ".join(x.text for x in parts if x.text),
                              sum(x.score for x in parts), line, conf,
                              joined_alignment(f.parts, parts), f.how,
                              joined_alignment(f.parts, parts, "best_targets"),
                              missing_terms=missing or None)  # fmt: skip
            if flag_below is not None and conf is not None:
                out.text = flagged(out.text, conf.words, flag_below)
            sentences.append(out)
            k += n
        if doc is None:  # a line: one sentence, or a marked-up line's blocks (_mark_up)
            cut = any(i in truncated for i in range(first, k))
            outs.append(TextOut(" ".join(s.text for s in sentences), sentences, None, cut))
            continue
        paragraphs, at = [], 0
        for paragraph in doc.paragraphs:
            mine = sentences[at : at + len(paragraph.sentences)]
            at += len(mine)
            target = doc.paragraph_text(paragraph, [s.text for s in mine])
            source = doc.text[paragraph.start : paragraph.end]
            paragraphs.append((paragraph.line, source, target, mine))
        outs.append(TextOut(doc.assemble([s.text for s in sentences]), sentences, paragraphs))
    if p.marked is not None:
        for out, marked in zip(outs, p.marked, strict=True):
            _mark_up(out, marked, alignment)
    return outs


def _mark_up(out: TextOut, marked: Marked, alignment: bool) -> None:
    """A translated text's sentences, paragraphs and whole with the tags put back; each
    sentence keeps its plain source and text (what its words and alignment count)."""
    sentences = out.sentences if marked.segments else []
    found = marked.put_back([(s.text, s.alignment or [], s.best_targets or [])
                             for s in sentences])  # fmt: skip
    for k, s in enumerate(sentences):
        s.plain = (s.source, s.text)
        s.source, s.text = marked.source_of(k), found[k]
    for s in out.sentences:
        s.alignment = s.alignment if alignment else None
    out.text = marked.assemble(found)
    if out.paragraphs is None:  # a line: the line as given, and all of it translated
        whole = _joined_sentence(out.sentences) if marked.segments else out.sentences[0]
        whole.source, whole.text = marked.markup.source, out.text
        out.sentences = [whole]
        return
    for k, members in enumerate(marked.paragraphs):
        line, _, _, mine = out.paragraphs[k]
        first, last = members[0], members[-1]
        start, end = marked.paragraph(first, last)
        source, target = marked.markup.source[start:end], marked.assemble(found, first, last)
        out.paragraphs[k] = (line, source, target, mine)


def _joined_sentence(blocks: list[SentenceOut]) -> SentenceOut:
    """A marked-up line's blocks, each translated on its own, as the line's one sentence: their
    plain texts joined by a space, the scores summed, the words and alignments one after the
    other."""
    if len(blocks) == 1:
        return blocks[0]
    sources, texts = [s.plain[0] for s in blocks], [s.plain[1] for s in blocks]
    found = [s.confidence for s in blocks]
    conf = joined_confidence(found) if all(c is not None for c in found) else None
    links = joined_links(sources, texts, [s.alignment for s in blocks])
    plain = (" ".join(x for x in sources if x), " ".join(x for x in texts if x))
    missing = [term for s in blocks for term in s.missing_terms or []]
    return SentenceOut(plain[0], plain[1], sum(s.score for s in blocks), 1, conf, links,
                       plain=plain, missing_terms=missing or None)  # fmt: skip


@dataclass
class TextsResult:
    texts: list[TextOut]
    splits: list[Split] = field(default_factory=list)


def check_options(
    decode: DecodeConfig, document: bool, structured: bool, flag: bool, markup: str = "text"
) -> None:
    """What the text modes cannot do: several translations per sentence, or alignments in a
    document's or a marked-up text."""
    if markup not in MARKUPS:
        raise UserError(f"markup {markup!r}: choose one of {', '.join(MARKUPS)}")
    marked = markup != "text"
    if decode.nbest > 1 and (document or structured or flag or marked):
        raise UserError(f"nbest {decode.nbest}: documents, jsonl, flagged words and markup "
                        "carry one translation per sentence; leave nbest at 1")  # fmt: skip
    if (document or marked) and decode.alignment and not structured:
        what = "a marked-up text" if marked else "a document's text"
        raise UserError(f"alignment: {what} has no place for word alignments; ask for "
                        "output_format jsonl")  # fmt: skip


def translate_texts(
    engine,
    texts: list[str],
    decode: DecodeConfig | None = None,
    document: bool = False,
    confidence: bool = False,
    flag_below: float | None = None,
    prefixes: list[str] | None = None,
    markup: str = "text",
    glossary: Glossary | None = None,
) -> TextsResult:
    """Translates ``texts``: lines, or with ``document`` documents (paragraphs separated by
    blank lines), all their sentences in one batched call of ``engine`` (an ``Engine``).

    Args:
        decode: the search (default: the engine's own); one translation per sentence.
        confidence: also score each sentence and its words (confidence.py).
        flag_below: mark the words less likely than this as ``[[word]]`` (implies confidence).
        prefixes: one target prefix per text (lines only).
        markup: "html" or "xml": the texts are marked up, and their tags are put back around
            the words they belong to (markup.py); "text": plain text.
        glossary: terms each sentence's translation must use (glossary.py; the torch engine);
            a sentence left without one for lack of room lists it in ``missing_terms``.
    """
    d = search_of(decode, engine.decode)
    check_texts(texts, "texts")
    if prefixes is not None:
        check_texts(prefixes, "prefixes")
    if flag_below is not None:
        check_threshold(flag_below, "flag_below")
    check_options(d, document, confidence, flag_below is not None, markup)
    if document and prefixes is not None:
        raise UserError("prefix: a document's sentences are found by the segmenter; prefixes "
                        "go with lines, not documents")  # fmt: skip
    glossary = glossary_of(glossary)  # a Glossary, or (source, target) pairs
    p = plan_for(engine, texts, document, markup, glossary)
    terms = {"glossary": glossary} if glossary is not None else {}  # only where asked for
    result = engine.translate(p.parts, aligned(p, d, engine.name), p.part_prefixes(prefixes),
                              **terms)  # fmt: skip
    found = None
    if confidence or flag_below is not None:
        found = confidences(engine, engine.tokenizers, p.parts, _tokens(result))
    return TextsResult(put_back(p, result, found, flag_below, d.alignment, glossary), p.splits)


def plan_for(
    engine, texts: list[str], document: bool, markup: str = "text",
    glossary: Glossary | None = None,
) -> Plan:  # fmt: skip
    """``plan`` (``plan_marked`` with ``markup``) with the engine's source language, tokenizer
    and length limit; a sentence too long for the model is never split through one of
    ``glossary``'s source terms."""
    tokenizer = engine.tokenizers.src

    def pieces(text: str) -> int:
        return len(encode_source(tokenizer.encode(text)))

    language, limit = engine.config.data.src_lang, engine.config.model.max_positions
    whole = glossary.pattern if glossary is not None else None  # no split goes through a term
    if markup != "text":
        return plan_marked(texts, markup, document, language, pieces, limit, whole)
    return plan(texts, document, language, pieces, limit, whole)


def aligned(p: Plan, decode: DecodeConfig, engine: str) -> DecodeConfig:
    """The search for ``p`` on ``engine`` ("torch", "ctranslate2"): with word alignments for
    marked-up texts, which need them, by masking where ``alignment_method`` is auto and the
    engine can (tags around the right words 43 of 59 times against 40 for attention on the
    number-words page: docs/translating.md)."""
    if p.marked is None:
        return decode
    method = decode.alignment_method
    if method == "auto":
        method = "masking" if engine == "torch" else "attention"
    return replace(decode, alignment=True, alignment_method=method)


def _tokens(result: TranslationResult) -> list[list[int]]:
    return [options[0].tokens if options else [] for options in result.nbest]


def sentence_record(s: SentenceOut) -> dict:
    """A sentence as JSON: source, text, score, and when known log_prob, words, alignment."""
    out: dict = {"source": s.source, "text": s.text, "score": _number(s.score)}
    if s.confidence is not None:
        out["log_prob"] = _number(s.confidence.log_prob)
        out["words"] = [_word(w) for w in s.confidence.words]
    if s.alignment is not None:
        out["alignment"] = pharaoh(s.alignment)
    if s.plain is not None:  # what the words and the alignment count: the text without tags
        out["plain_source"], out["plain_text"] = s.plain
    if s.split:
        out["split"] = s.split
    if s.missing_terms:
        out["missing_terms"] = s.missing_terms
    return out


def record(t: TextOut) -> dict:
    """A translated text as JSON: a line's sentence record, or a document's text with its
    paragraphs, each with its line, source, text and sentences."""
    if t.paragraphs is None:
        return {**sentence_record(t.sentences[0]), "truncated": t.truncated}
    return {"text": t.text, "paragraphs": [
        {"line": line, "source": source, "text": target,
         "sentences": [sentence_record(s) for s in sentences]}
        for line, source, target, sentences in t.paragraphs]}  # fmt: skip


def _word(w: Word) -> dict:
    return {"word": w.word, "prob": round(w.prob, 6)}


def _number(x: float) -> float | None:
    return x if x == x and abs(x) != float("inf") else None
