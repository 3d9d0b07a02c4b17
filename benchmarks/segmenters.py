"""Which sentence segmenter ``translate --document`` uses: pysbd and sentencex, measured.

    .venv/bin/python benchmarks/segmenters.py --data_dir ../shared/data
    (needs both: .venv/bin/pip install pysbd sentencex; the package itself needs only its pick)

Sentences whose boundaries are known (Multi30k's test_2016_flickr in English, German and
French: one caption a line; Tatoeba's English, French and German sides: 1,000 lines drawn with
a fixed seed) are joined, five to a paragraph, with one space, and each segmenter splits the
paragraphs again. Two kinds of error are counted:

- **merged**: a boundary between two lines that the segmenter missed: two sentences go to the
  model as one (the harm the document mode exists to avoid);
- **split**: a boundary the segmenter put inside a line. Some Tatoeba lines hold two sentences
  ("Run! I'm late."), so a few of these are right; on Multi30k (one caption a line) none is.

Writes ``benchmarks/results/segmenters.md``.
"""

from __future__ import annotations

import argparse
import gzip
import random
import time
import zipfile
from collections.abc import Callable
from pathlib import Path

RESULTS = Path(__file__).parent / "results"
PER_PARAGRAPH = 5
END_MARKS = (".", "!", "?", "…")


def multi30k(data: Path, lang: str) -> list[str]:
    with gzip.open(data / "multi30k" / f"test_2016_flickr.{lang}.gz", "rt", encoding="utf-8") as f:
        return [line.strip() for line in f if line.strip()]


def tatoeba(data: Path, pair: str, column: int, count: int = 1000) -> list[str]:
    with zipfile.ZipFile(data / "tatoeba" / f"{pair}-eng.zip") as z:
        rows = z.read(f"{pair}.txt").decode("utf-8").splitlines()
    lines = sorted({row.split("\t")[column].strip() for row in rows if "\t" in row})
    return random.Random(0).sample(lines, count)


def segmenters(lang: str) -> dict[str, Callable[[str], list[str]]]:
    import pysbd
    import sentencex

    pysbd_segmenter = pysbd.Segmenter(language=lang, clean=False, char_span=True)
    return {
        "pysbd 0.3.4": lambda text: [span.sent for span in pysbd_segmenter.segment(text)],
        "sentencex": lambda text: list(sentencex.segment(lang, text)),
    }


def starts(pieces: list[str]) -> set[int]:
    """Where each piece's text (after its leading spaces) begins in the joined paragraph."""
    found, at = set(), 0
    for piece in pieces:
        found.add(at + len(piece) - len(piece.lstrip()))
        at += len(piece)
    return found


def unmarked(lines: list[str]) -> int:
    """Joins inside paragraphs whose left line ends without . ! ? or a closing quote after one:
    no rule-based segmenter can see those boundaries."""
    inside = [line for i, line in enumerate(lines[:-1]) if (i + 1) % PER_PARAGRAPH]
    return sum(1 for line in inside if not line.rstrip("\"'»”)").endswith(END_MARKS))


def measure(lines: list[str], split: Callable[[str], list[str]]) -> dict[str, float]:
    merged = extra = 0
    seconds = 0.0
    for i in range(0, len(lines), PER_PARAGRAPH):
        group = lines[i : i + PER_PARAGRAPH]
        text = " ".join(group)
        truth = starts([line + " " for line in group])
        began = time.perf_counter()
        pieces = split(text)
        seconds += time.perf_counter() - began
        assert "".join(pieces).replace(" ", "") == text.replace(" ", ""), "text was changed"
        found = starts(pieces)
        merged += len(truth - found)
        extra += len(found - truth)
    return {"merged": merged, "split": extra, "ms": seconds * 1000}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data_dir", default="../shared/data", help="multi30k/ and tatoeba/")
    args = parser.parse_args()
    data = Path(args.data_dir)
    texts = [(f"Multi30k test {lang}", lang, multi30k(data, lang)) for lang in ("en", "de", "fr")]
    texts += [("Tatoeba en", "en", tatoeba(data, "fra", 0)),
              ("Tatoeba fr", "fr", tatoeba(data, "fra", 1)),
              ("Tatoeba de", "de", tatoeba(data, "deu", 1))]  # fmt: skip
    rows, totals = [], {}
    for name, lang, lines in texts:
        for tool, split in segmenters(lang).items():
            m = measure(lines, split)
            boundaries = len(lines) - -(-len(lines) // PER_PARAGRAPH)  # joins inside paragraphs
            counts = f"{unmarked(lines)} | {m['merged']} | {m['split']} | {m['ms']:.0f}"
            rows.append(f"| {name} | {tool} | {len(lines):,} | {boundaries:,} | {counts} |")
            total = totals.setdefault(tool, [0, 0, 0.0])
            total[0] += m["merged"]
            total[1] += m["split"]
            total[2] += m["ms"]
    for tool, (merged, extra, ms) in totals.items():
        rows.append(f"| **all** | {tool} | | | | **{merged}** | **{extra}** | {ms:.0f} |")
    table = [
        f"Sentence segmenters on known sentences joined {PER_PARAGRAPH} to a paragraph "
        "(benchmarks/segmenters.py).",
        "",
        "| text | segmenter | sentences | boundaries | unmarked | merged | split | ms |",
        "|---|---|---|---|---|---|---|---|",
        *rows,
        "",
        "unmarked: boundaries after a line without . ! ? (a caption without a full stop), which no "
        "rule-based segmenter sees; merged: a boundary between two lines missed (two sentences "
        "translated as one); split: a boundary put inside a line (some Tatoeba lines hold two "
        "sentences, so a few are right); ms: the segmenter's own time.",
    ]
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "segmenters.md").write_text("\n".join(table) + "\n", encoding="utf-8")
    print("\n".join(table))


if __name__ == "__main__":
    main()
