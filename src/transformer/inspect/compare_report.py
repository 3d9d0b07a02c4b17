"""The report of ``transformer compare``: a markdown page, its plots, and the numbers as JSON.

    FOLDER/report.md                  the tables, in the notes' words, with the plots inline
    FOLDER/bleu_by_length.png, .svg   BLEU by source-length bucket, one line per model
    FOLDER/forward_time.png, .svg     milliseconds of a forward pass against sentence length
    FOLDER/training_speed.png, .svg   training tokens per second, one bar per model
    FOLDER/compare.json               every figure
    FOLDER/transformer-report.json    what FOLDER is (a report), listing the files it made

Nothing a user has is lost: FOLDER goes through the write gate (``files.replace_folder``). It
must be missing, empty or an earlier report holding only the files that report made (a note of
the user's in it is named, not deleted), and lie inside no run nor any other project folder;
anything else is refused before any work. The report is written into a hidden sibling folder
and renamed into place once complete; an earlier report is moved aside first and deleted after
the rename.
"""

from __future__ import annotations

import math
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING

from ..files import (
    check_replaceable,
    mark_folder,
    replace_folder,
    write_bytes,
    write_json_atomic,
    write_text,
)
from ..model_dir.layout import marker_name
from .compare import Comparison
from .visualize import figure_bytes, new_figure, svg_text

if TYPE_CHECKING:  # matplotlib is imported where a figure is drawn (visualize.new_figure)
    from matplotlib.figure import Figure

NUMBERS = "compare.json"
MARKER = marker_name("report")  # transformer-report.json
FORMAT = "transformer/compare"
PLOTS = ("bleu_by_length", "forward_time", "training_speed")
FORMATS = ("png", "svg")


def check_report_folder(out: Path) -> None:
    """OUT may be missing, an empty folder, or an earlier report holding only what it made, and
    lie inside no project folder (the runs compared are project folders too)."""
    check_replaceable(out, "report", "--out", {})


def write_report(comparison: Comparison, out: Path) -> list[Path]:
    """Writes the report into ``out`` (see the module docstring); returns the files, in ``out``."""
    names = [f"{plot}.{fmt}" for plot in PLOTS for fmt in FORMATS]
    with replace_folder(out, "report", "--out", {}) as staging:  # replaced whole
        figures = (bleu_figure(comparison), forward_figure(comparison), speed_figure(comparison))
        with svg_text():
            for plot, figure in zip(PLOTS, figures, strict=True):
                for fmt in FORMATS:
                    write_bytes(staging / f"{plot}.{fmt}", figure_bytes(figure, fmt, 110), staging)
        write_text(staging / "report.md", markdown(comparison), staging)
        write_json_atomic(staging / NUMBERS, {"format": FORMAT, **asdict(comparison)}, staging)
        mark_folder(staging, "report", format=FORMAT)
    return [out / name for name in ["report.md", *names, NUMBERS, MARKER]]


def _bucket_labels(c: Comparison, between: str) -> list[str]:
    """E.g. "4-5 words (212)": the bucket's source lengths and its number of sentences."""
    spans = [f"{low}" if low == high else f"{low}-{high}" for low, high in c.buckets]
    return [f"{span}{between}({n})" for span, n in zip(spans, c.bucket_sizes, strict=True)]


def _fmt(value: float | None, digits: int = 1) -> str:
    return "—" if value is None or math.isnan(value) else f"{value:,.{digits}f}"


def _table(head: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    return lines + ["| " + " | ".join(row) + " |" for row in rows]


def markdown(c: Comparison) -> str:
    """The report page: what was compared, the tables, the plots."""
    lines = [
        "# RNN encoder-decoders and the Transformer, side by side", "",
        f"Test set: {c.test}. Source lengths are counted in words; each bucket holds about as "
        f"many sentences. Forward passes: {c.forward_batch} sentences, on {c.device}.", "",
        "## Translation quality against sentence length", "",
        "\"Sentence Length ↑↑ → score ↓↓\" for the encoder-decoder that squeezes the sentence "
        "into one vector; attention gives each target word its own context c_i = Σ_j α_ij h_j.",
        "", "![BLEU by source length](bleu_by_length.png)", "",
        "BLEU by source length in words (sentences in the bucket); a bucket is scored with "
        "sacreBLEU's effective order, since a bucket of short sentences holds no 4-grams "
        f"(`{c.signatures['buckets']}`); \"all\" is the standard corpus BLEU "
        f"(`{c.signatures['all']}`):", "",
    ]  # fmt: skip
    head = ["model", *_bucket_labels(c, " "), "all"]
    lines += _table(head, [[r.name, *map(_fmt, r.bucket_bleu), _fmt(r.bleu)] for r in c.runs])
    lines += ["", "Exact match (%), by the same buckets:", ""]
    lines += _table(head, [[r.name, *(_fmt(100 * x) for x in r.bucket_exact),
                            _fmt(100 * r.exact)] for r in c.runs])  # fmt: skip
    lines += [
        "", "## Speed: sequential against parallel", "",
        "An RNN computes h_j from h_{j-1}, one word after another; the Transformer sends all "
        "the words of a sentence through at once (\"TRANSFORMERS ≠ LSTM RNN\", \"Scalable\").",
        "", "![forward time](forward_time.png) ![training speed](training_speed.png)", "",
    ]  # fmt: skip
    lines += _table(
        ["model", "architecture", "parameters", "steps", "training s", "tokens/s", "s/epoch"],
        [[r.name, r.model, f"{r.parameters:,}", f"{r.steps:,}", _fmt(r.train_seconds),
          _fmt(r.tokens_per_s, 0), _fmt(r.seconds_per_epoch)] for r in c.runs],
    )  # fmt: skip
    lines += ["", "Milliseconds of one teacher-forced forward pass (source and target of L words):",
              ""]  # fmt: skip
    lines += _table(["model", *[f"L = {n}" for n in c.lengths]],
                    [[r.name, *(_fmt(ms) for ms in r.forward_ms)] for r in c.runs])  # fmt: skip
    return "\n".join(lines) + "\n"


def bleu_figure(c: Comparison) -> Figure:
    """BLEU per source-length bucket, one line per model (Bahdanau et al. 2015, figure 2)."""
    fig = new_figure(figsize=(7.0, 4.2))
    ax = fig.add_subplot()
    x = range(len(c.buckets))
    for run in c.runs:
        ax.plot(x, run.bucket_bleu, "o-", label=f"{run.name}: {run.model}")
    ax.set_xticks(x, _bucket_labels(c, "\n"))
    ax.set_xlabel("source length in words (sentences)")
    ax.set_ylabel("BLEU")
    ax.set_title("Translation quality against sentence length", fontsize=10)
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def forward_figure(c: Comparison) -> Figure:
    """Forward-pass milliseconds against sentence length, both axes logarithmic."""
    fig = new_figure(figsize=(7.0, 4.2))
    ax = fig.add_subplot()
    for run in c.runs:
        ax.plot(c.lengths, run.forward_ms, "o-", label=f"{run.name}: {run.model}")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks(c.lengths, [str(n) for n in c.lengths])
    ax.set_xlabel("sentence length L (source and target tokens)")
    ax.set_ylabel(f"ms per forward pass ({c.forward_batch} sentences)")
    ax.set_title("Sequential (RNN) against parallel (Transformer)", fontsize=10)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def speed_figure(c: Comparison) -> Figure:
    """Training tokens per second, one bar per model."""
    fig = new_figure(figsize=(7.0, 3.6))
    ax = fig.add_subplot()
    rates = [r.tokens_per_s or 0.0 for r in c.runs]
    ax.barh(range(len(c.runs)), rates, color="tab:blue")
    ax.set_yticks(range(len(c.runs)), [f"{r.name}\n{r.model}" for r in c.runs], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("training tokens per second (source + target, padding included)")
    ax.set_title("Training speed", fontsize=10)
    ax.grid(alpha=0.3, axis="x")
    fig.tight_layout()
    return fig
