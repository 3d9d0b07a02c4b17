"""A single-file HTML report of one translation: the sentences, every attention map, the numbers.

The file works offline: CSS is inline, figures are base64 PNG data URIs, nothing is fetched.
All text from the user (sentences, tokens, extra numbers) goes through ``html.escape``.

Shapes: H heads, S source length, T target length.
"""

from __future__ import annotations

import base64
import html
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from ..files import atomic_write
from ..model.base import ATTENTION_KINDS, AttentionMaps
from .visualize import (
    KIND_TITLES,
    Panel,
    attention_panels,
    draw_panel,
    figure_bytes,
    mean_cross_attention_panels,
)

_CSS = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 75em; color: #222; }
h1, h2, h3 { font-weight: 600; }
table { border-collapse: collapse; margin: 0.5em 0 1em; font-size: 0.85em; }
th, td { border: 1px solid #ccc; padding: 0.2em 0.45em; }
th { background: #f3f3f3; font-weight: 500; }
td.w { text-align: right; font-variant-numeric: tabular-nums;
       background: rgba(40, 90, 160, var(--w)); }
td.dark { color: #fff; }
table.facts th { text-align: left; }
code.tok { background: #f3f3f3; padding: 0 0.25em; margin-right: 0.2em; border-radius: 3px; }
.grid { display: flex; flex-wrap: wrap; gap: 0.5em; }
figure { margin: 0; }
img { max-width: 100%; height: auto; }
details { margin: 0.3em 0 1.2em; }
summary { cursor: pointer; color: #345; }
p.help { color: #555; max-width: 60em; }
"""

_HELP = (
    "Rows are queries, columns are keys; each row sums to 1. The decoder's queries are its "
    "inputs, &lt;s&gt; followed by the translation: the row of a token is the position that "
    "predicts the next token. Layers and heads are numbered from 1."
)


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def _img(panel: Panel, annotate: bool) -> str:
    png = figure_bytes(draw_panel(panel, annotate), "png", dpi=80)
    data = base64.b64encode(png).decode("ascii")
    return f'<figure><img src="data:image/png;base64,{data}" alt="{_e(panel.title)}"></figure>'


def weights_table(panel: Panel) -> str:
    """The panel's matrix as an HTML table: key tokens across, query tokens down, cells shaded."""
    head = "".join(f"<th>{_e(k)}</th>" for k in panel.key_labels)
    rows = [f"<tr><th>query \\ key</th>{head}</tr>"]
    for label, row in zip(panel.query_labels, panel.matrix, strict=True):
        cells = "".join(_cell(float(v)) for v in row)
        rows.append(f"<tr><th>{_e(label)}</th>{cells}</tr>")
    return f'<table title="{_e(panel.title)}">' + "".join(rows) + "</table>"


def _cell(value: float) -> str:
    # Shaded by weight (the --w custom property sets the alpha) so the alignment shows here too.
    alpha = float(np.clip(value, 0.0, 1.0))
    dark = " dark" if alpha > 0.55 else ""
    return f'<td class="w{dark}" style="--w: {alpha:.2f}">{value:.3f}</td>'


def _tokens(labels: Sequence[str]) -> str:
    return "".join(f'<code class="tok">{_e(t)}</code>' for t in labels)


def _facts(rows: Mapping[str, object]) -> str:
    cells = []
    for key, value in rows.items():
        shown = f"{value:.4g}" if isinstance(value, float) else value
        cells.append(f"<tr><th>{_e(key)}</th><td>{_e(shown)}</td></tr>")
    return '<table class="facts">' + "".join(cells) + "</table>"


def _kind_section(kind: str, panels: list[Panel]) -> list[str]:
    """One section per attention kind: per layer, the head figures, then their numbers."""
    parts = [f"<h2>{_e(KIND_TITLES[kind])}</h2>"]
    for layer in sorted({p.layer for p in panels}):
        in_layer = [p for p in panels if p.layer == layer]
        parts.append(f"<h3>Layer {layer + 1}</h3>")
        # The numbers are in the tables below: unannotated heatmaps are lighter and faster.
        figures = "".join(_img(p, annotate=False) for p in in_layer)
        parts.append(f'<div class="grid">{figures}</div>')
        tables = "".join(f"<h4>Head {p.head + 1}</h4>{weights_table(p)}" for p in in_layer)
        summary = f"Numbers: layer {layer + 1}, {len(in_layer)} heads"
        parts.append(f"<details><summary>{summary}</summary>{tables}</details>")
    return parts


def write_html_report(
    path: str | Path,
    source: str,
    translation: str,
    maps: AttentionMaps,
    src_labels: Sequence[str],
    tgt_labels: Sequence[str],
    extra_numbers: Mapping[str, object] | None = None,
) -> Path:
    """Writes the report and returns its path.

    Args:
        path: the .html file to write (its folder is created).
        source, translation: the sentences as text.
        maps: ``Transformer.attention_maps`` of the source and the decoder input (batch of 1).
        src_labels: source tokens; tgt_labels: decoder input tokens (<s> + translation).
        extra_numbers: optional facts shown in a table (e.g. model preset, BLEU, log-prob).
    """
    panels = attention_panels(maps, src_labels, tgt_labels)
    means = mean_cross_attention_panels(maps, src_labels, tgt_labels)
    facts = {"Source": source, "Translation": translation}
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>Attention: {_e(source)}</title><style>{_CSS}</style></head><body>",
        f"<h1>Attention in the {'Transformer' if maps.encoder else 'RNN encoder-decoder'}</h1>",
        _facts(facts),
        f"<p>Source tokens: {_tokens(src_labels)}</p>",
        f"<p>Decoder input tokens: {_tokens(tgt_labels)}</p>",
    ]
    if extra_numbers:
        parts += ["<h2>Numbers</h2>", _facts(extra_numbers)]
    parts += [
        f'<p class="help">{_HELP}</p>',
        "<h2>Alignment: encoder-decoder attention, mean of the heads</h2>",
    ]
    for panel in means:
        parts += [f"<h3>Layer {panel.layer}</h3>", _img(panel, annotate=True), weights_table(panel)]
    for kind in ATTENTION_KINDS:
        in_kind = [p for p in panels if p.kind == kind]
        if in_kind:  # an RNN has encoder-decoder attention only
            parts += _kind_section(kind, in_kind)
    parts.append("</body></html>")
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    with atomic_write(out) as f:
        f.write("\n".join(parts))
    return out
