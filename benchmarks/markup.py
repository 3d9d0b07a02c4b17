"""Inline markup kept through translation, measured on test pages of 50 tagged sentences.

    .venv/bin/python benchmarks/markup.py --model runs/numbers-en-fr \
        --out benchmarks/results/markup.md --outputs markup-outputs.txt

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

For each page, ``translate --markup html`` (``translate_texts(..., markup="html")``, beam 4)
and then, counted by readers independent of ours: the tags given; the tags kept (each start tag
exactly once, attributes byte for byte, and its end tag once); the sentences well-formed (an
XML parser reads each output line); and the seconds the translation took.
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

from transformer.data.corpora import load_splits
from transformer.inference.engine import load_torch_engine
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


def multi30k(data: Path) -> list[str] | None:
    path = data / "multi30k" / "test_2016_flickr.en.gz"
    if not path.is_file():
        return None
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [line.strip() for _, line in zip(range(50), f, strict=False)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="a trained model directory")
    parser.add_argument("--data", default="../shared/data", help="holds multi30k/ (not fetched)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", help="also write the table to this Markdown file")
    parser.add_argument("--outputs", help="write each numbers sentence and its translation here")
    args = parser.parse_args()

    torch.set_num_threads(2)
    engine = load_torch_engine(args.model, beam_size=4)
    numbers = [s for s, _ in load_splits(engine.config.data).test if len(s.split()) >= 3][:50]
    pages = {"numbers": numbers, "multi30k": multi30k(Path(args.data))}
    rows = ["| page | sentences | tags | tags kept | well-formed sentences | seconds |",
            "|---|---|---|---|---|---|"]  # fmt: skip
    for name, sentences in pages.items():
        if sentences is None:
            rows.append(f"| {name} | skipped: no multi30k/test_2016_flickr.en.gz in {args.data} "
                        "| | | | |")  # fmt: skip
            continue
        rng = random.Random(args.seed)
        lines = [tagged(s, rng) for s in sentences]
        found, outputs = measure(engine, lines)
        rows.append(f"| {name} | {found['sentences']} | {found['tags']} | {found['kept']} "
                    f"({found['kept'] / found['tags']:.0%}) | {found['well_formed']} of "
                    f"{found['sentences']} | {found['seconds']:.1f} |")  # fmt: skip
        if name == "numbers" and args.outputs:
            pairs = enumerate(zip(lines, outputs, strict=True), 1)
            Path(args.outputs).write_text("".join(f"{k}\t{line}\n\t{out}\n" for k, (line, out)
                                                  in pairs))  # fmt: skip
    table = "\n".join(rows)
    print(table)
    if args.out:
        Path(args.out).write_text(table + "\n")


if __name__ == "__main__":
    main()
