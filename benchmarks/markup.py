"""Inline markup kept through translation, measured on test pages of 50 tagged sentences.

    .venv/bin/python benchmarks/markup.py --model runs/numbers-en-fr \
        --de-en runs/multi30k-de-en --out benchmarks/results/markup.md --outputs outputs.txt

Each page is 50 sentences, one a line, with tags put around their words by a fixed, seeded rule
(``tagged``): one or two of ``<b>``, ``<i>``, ``<em class="k">`` and a link with an
``&amp;`` and quotes in its attributes, around one or two words each (sometimes one inside
another), and sometimes a ``<br/>`` or a ``<code>`` between words. Two pages:

- ``numbers``: the first 50 sentences of three words or more of the model's own test split
  (never trained on): sentences the model translates, for checking by hand whether each tag is
  around the right words (``--outputs`` writes them side by side);
- ``multi30k``: the first 50 English sentences of Multi30k's test_2016_flickr, read from
  ``--data`` (never downloaded; skipped, saying so, when absent): real sentence shapes for the
  counts below, whatever the model makes of them.

- ``multi30k-de``, with ``--de-en`` (a German -> English model, such as the Multi30k one): the
  first 50 German sentences of test_2016_flickr, tagged by the same rule, translated by that
  model: real text through a model that translates it. ``--outputs`` lists each element's
  source words and the words it wraps in the translation, for checking by hand.

For each page, ``translate --markup html`` (``translate_texts(..., markup="html")``, beam 4)
and then, counted by readers independent of ours: the tags given; the tags kept (each start tag
exactly once, attributes byte for byte, and its end tag once); the sentences well-formed (an
XML parser reads each output line); and the seconds the translation took.

On the numbers page the right place of a tag is known without a person: English and French
number words have the same parts (``number_parts``: in each group of three digits, the hundreds
digit, the word for hundred, the tens and units, and the word for thousand), so an element is
around the right words when it wraps exactly the target words of the parts its source words
are (``and`` is part of nothing; "one" of "one hundred" neither, French writing "cent").
Checked on the model's own translation, wrong numbers and all. The same parts give the share
of word alignments that link a target word to a source word it translates, on the reference
translations of the test split.
"""

from __future__ import annotations

import argparse
import gzip
import random
import time
import xml.etree.ElementTree as ET
from collections import Counter
from html.parser import HTMLParser
from pathlib import Path

import torch

from transformer.config.decode import ALIGNMENT_METHODS
from transformer.data.batching import encode_source, pad
from transformer.data.corpora import load_splits
from transformer.inference.alignment import (
    attach_attention,
    attach_masking,
    word_alignment,
    word_of_pieces,
)
from transformer.inference.engine import load_torch_engine
from transformer.inference.search import Hypothesis
from transformer.inference.texts import translate_texts

TAGS = [
    "<b>",
    "<i>",
    '<em class="k">',
    '<a href="https://example.org/?q=1&amp;r=2" title=\'a "t"\'>',
]
KEPT = ["<br/>", "<code>x &lt; 2</code>"]


def tagged(sentence: str, rng: random.Random) -> str:
    """``sentence`` with one or two elements around one or two words each (one inside another
    a quarter of the time), and a void element or ``<code>`` between words a third of it."""
    words = sentence.split()
    spans: list[tuple[int, int]] = []
    for _ in range(rng.choice([1, 1, 2])):
        length = rng.choice([1, 2])
        start = rng.randrange(max(1, len(words) - length + 1))
        end = min(len(words), start + length) - 1
        if all(end < a or start > b for a, b in spans):
            spans.append((start, end))
    opening: dict[int, list[str]] = {}
    closing: dict[int, list[str]] = {}
    for start, end in spans:
        tag = rng.choice(TAGS)
        name = tag[1:].split()[0].rstrip(">")
        opening.setdefault(start, []).append(tag)
        closing.setdefault(end, []).insert(0, f"</{name}>")
        if end > start and rng.random() < 0.25:  # a second element around the first word
            opening[start].append("<b>")
            closing.setdefault(start, []).insert(0, "</b>")
    between = rng.randrange(len(words) - 1) if len(words) > 1 and rng.random() < 0.33 else None
    out = []
    for k, word in enumerate(words):
        out.append("".join(opening.get(k, [])) + word + "".join(closing.get(k, [])))
        if k == between:
            out.append(rng.choice(KEPT))
    return " ".join(out)


class Tags(HTMLParser):
    """The start tags (as written) and end tags of a text, read by the standard library."""

    def __init__(self, text: str) -> None:
        super().__init__(convert_charrefs=True)
        self.found: Counter = Counter()
        self.feed(text)
        self.close()

    def handle_starttag(self, tag, attrs):
        self.found[self.get_starttag_text()] += 1

    handle_startendtag = handle_starttag

    def handle_endtag(self, tag):
        self.found[f"</{tag}>"] += 1


class Wrapped(HTMLParser):
    """The words of a marked-up line (text split at spaces, ``<code>`` left out) and, for each
    element around words, its start tag as written and the words it wraps, in start-tag order."""

    def __init__(self, text: str) -> None:
        super().__init__(convert_charrefs=True)
        self.words: list[str] = []
        self.elements: list[tuple[str, list[int]]] = []
        self.open: list[int | None] = []  # per open element: its index (None: code)
        self.in_word = False
        self.feed(text)
        self.close()

    def handle_starttag(self, tag, attrs):
        if tag == "code":
            self.open.append(None)
            return
        self.elements.append((self.get_starttag_text(), []))
        self.open.append(len(self.elements) - 1)

    def handle_startendtag(self, tag, attrs):  # <br/>: between words, around none
        pass

    def handle_endtag(self, tag):
        self.open.pop()

    def handle_data(self, data):
        if None in self.open:  # inside <code>
            self.in_word = False
            return
        for char in data:
            if char.isspace():
                self.in_word = False
                continue
            if not self.in_word:
                self.words.append("")
                self.in_word = True
            self.words[-1] += char
            for k in self.open:
                if k is not None and (
                    not self.elements[k][1] or self.elements[k][1][-1] != len(self.words) - 1
                ):
                    self.elements[k][1].append(len(self.words) - 1)


def matched(line: str, out: str) -> list[tuple[list[int], list[int]]]:
    """Each element of ``line`` (its source words) with the target words it wraps in ``out``:
    elements matched by start tag, the n-th ``<b>`` of the line with the n-th of the output."""
    given, found = Wrapped(line), Wrapped(out)
    pairs, taken = [], Counter()
    for tag, words in given.elements:
        theirs = [w for t, w in found.elements if t == tag]
        pairs.append((words, theirs[taken[tag]] if taken[tag] < len(theirs) else []))
        taken[tag] += 1
    return pairs


def number_parts(words: list[str]) -> list[tuple[str, str] | None]:
    """The part of the number each English or French number word is: (group, role), group "T"
    (thousands) or "U" (units), role "H" (the hundreds digit), "C" (hundred, cent), "X" (tens
    and units: "twenty-two", "vingt et un" word by word), "K" (thousand, mille); None for "and",
    which French does not write."""
    bare = [w.rstrip(",") for w in words]
    thousand = next((i for i, w in enumerate(bare) if w in ("thousand", "mille")), None)
    parts = []
    for i, word in enumerate(bare):
        group = "T" if thousand is not None and i <= thousand else "U"
        after = bare[i + 1] if i + 1 < len(bare) else ""
        if word == "and":
            parts.append(None)
            continue
        hundred = ("hundred", "cent", "cents")
        role = ("K" if word in ("thousand", "mille") else "C" if word in hundred
                else "H" if after in hundred else "X")  # fmt: skip
        parts.append((group, role))
    return parts


def placed_right(lines: list[str], outputs: list[str]) -> tuple[int, int]:
    """Of the numbers page's elements whose source words have a counterpart in the translation,
    how many wrap exactly the target words of the same parts (``number_parts``)."""
    right = total = 0
    for line, out in zip(lines, outputs, strict=True):
        source, target = number_parts(Wrapped(line).words), number_parts(Wrapped(out).words)
        for words, wraps in matched(line, out):
            want = {source[i] for i in words} - {None}
            gold = [j for j, part in enumerate(target) if part in want]
            if gold:
                total += 1
                right += wraps == gold
    return right, total


def links_right(engine, pairs: list[tuple[str, str]]) -> tuple[int, int]:
    """Word alignments (``--decode.alignment``'s) of reference pairs of number words: of the
    target words with a counterpart, how many are linked to a source word of the same part."""
    tok, right, total = engine.tokenizers, 0, 0

    def words(ids: list[int]) -> list[int | None]:
        return word_of_pieces([tok.src.id_to_piece(i) for i in ids])

    with torch.inference_mode():
        for source, target in pairs:
            src = encode_source(tok.src.encode(source))
            tgt = tok.tgt.encode(target)
            hypothesis = Hypothesis(tgt, score=0.0, log_prob=0.0)
            attach_attention(engine.model, pad([src], "cpu"), [[hypothesis]])
            if engine.decode.alignment_method in ("auto", "masking"):  # as markup aligns
                attach_masking(engine.model, [src], [[hypothesis]], words, 8192, 64)
            src_pieces = [tok.src.id_to_piece(i) for i in src[:-1]]
            tgt_pieces = [tok.tgt.id_to_piece(i) for i in tgt]
            links = word_alignment(hypothesis.attention, src_pieces, tgt_pieces)
            s_parts, t_parts = number_parts(source.split()), number_parts(target.split())
            for i, j in links:
                if any(p == t_parts[j] for p in s_parts if p is not None) and t_parts[j]:
                    total += 1
                    right += s_parts[i] == t_parts[j]
    return right, total


def well_formed(text: str) -> bool:
    try:
        ET.fromstring(f"<line>{text}</line>")
    except ET.ParseError:
        return False
    return True


def measure(engine, lines: list[str]) -> tuple[dict, list[str]]:
    start = time.perf_counter()
    outputs = [t.text for t in translate_texts(engine, lines, markup="html").texts]
    seconds = time.perf_counter() - start
    given = sum(sum(c for t, c in Tags(line).found.items() if not t.startswith("</"))
                for line in lines)  # fmt: skip
    kept = sum(sum(c for t, c in Tags(line).found.items() if not t.startswith("</")
                   and Tags(out).found[t] == c and _end_once(t, line, out))
               for line, out in zip(lines, outputs, strict=True))  # fmt: skip
    formed = sum(well_formed(out) for out in outputs)
    return {"sentences": len(lines), "tags": given, "kept": kept, "well_formed": formed,
            "seconds": seconds}, outputs  # fmt: skip


def _end_once(tag: str, line: str, out: str) -> bool:
    """The element's end tags are as many in ``out`` as in ``line`` (none for a void one)."""
    name = tag[1:].split()[0].rstrip("/>")
    end = f"</{name}>"
    return Tags(out).found[end] == Tags(line).found[end]


def multi30k(data: Path, lang: str = "en") -> list[str] | None:
    path = data / "multi30k" / f"test_2016_flickr.{lang}.gz"
    if not path.is_file():
        return None
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [line.strip() for _, line in zip(range(50), f, strict=False)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="a number-words model directory")
    parser.add_argument("--de-en", help="a German -> English model (the multi30k-de page)")
    parser.add_argument("--data", default="../shared/data", help="holds multi30k/ (not fetched)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--alignment_method", default="auto", choices=ALIGNMENT_METHODS,
                        help="auto: masking (torch), as translate --markup")  # fmt: skip
    parser.add_argument("--out", help="also write the table to this Markdown file")
    parser.add_argument(
        "--outputs",
        help="write each sentence, its translation and (German page) "
        "each element's words on both sides here, for checking by hand",
    )
    args = parser.parse_args()

    torch.set_num_threads(2)
    engine = load_torch_engine(args.model, beam_size=4, alignment_method=args.alignment_method)
    test = load_splits(engine.config.data).test
    numbers = [s for s, _ in test if len(s.split()) >= 3][:50]
    data = Path(args.data)
    model = Path(args.model).name
    pages = {"numbers": (model, engine, numbers, "en"),
             "multi30k": (model, engine, multi30k(data), "en")}  # fmt: skip
    if args.de_en:
        de_en = load_torch_engine(args.de_en, beam_size=4, alignment_method=args.alignment_method)
        pages["multi30k-de"] = (Path(args.de_en).name, de_en, multi30k(data, "de"), "de")
    rows = ["| page | model | sentences | tags | tags kept | well-formed sentences "
            "| elements around the right words | seconds |",
            "|---|---|---|---|---|---|---|---|"]  # fmt: skip
    listing = []
    for name, (model, translator, sentences, lang) in pages.items():
        if sentences is None:
            rows.append(f"| {name} | | skipped: no multi30k/test_2016_flickr.{lang}.gz in "
                        f"{args.data} | | | | | |")  # fmt: skip
            continue
        rng = random.Random(args.seed)
        lines = [tagged(s, rng) for s in sentences]
        found, outputs = measure(translator, lines)
        if name == "numbers":
            right, total = placed_right(lines, outputs)
            placed = f"{right} of {total} ({right / total:.0%}), by the number's parts"
        else:
            placed = "by hand (--outputs)" if name == "multi30k-de" else "– (nonsense to check)"
        rows.append(f"| {name} | {model} | {found['sentences']} "
                    f"| {found['tags']} | {found['kept']} ({found['kept'] / found['tags']:.0%}) "
                    f"| {found['well_formed']} of {found['sentences']} | {placed} "
                    f"| {found['seconds']:.1f} |")  # fmt: skip
        if name != "multi30k":
            listing.append(f"## {name}\n")
            for k, (line, out) in enumerate(zip(lines, outputs, strict=True), 1):
                listing.append(f"{k}\t{line}\n\t{out}\n")
                given, got = Wrapped(line).words, Wrapped(out).words
                for words, wraps in matched(line, out):
                    source = " ".join(given[i] for i in words)
                    listing.append(f"\t[{source}] -> [{' '.join(got[j] for j in wraps)}]\n")
    right, total = links_right(engine, test[:300])
    table = "\n".join(rows) + (
        f"\n\nWord alignments of the first 300 reference pairs of the "
        f"number-words test split: {right} of {total} target words "
        f"({right / total:.1%}) linked to a source word of their part."
    )
    print(table)
    if args.out:
        Path(args.out).write_text(table + "\n")
    if args.outputs:
        Path(args.outputs).write_text("".join(listing))


if __name__ == "__main__":
    main()
