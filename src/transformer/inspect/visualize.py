"""Figures: attention heatmaps per layer and head, and the sinusoidal positional encodings.

Data and drawing are kept apart. ``attention_panels`` picks the matrix and the token labels of
each heatmap from ``AttentionMaps`` (what tests check); ``draw_panel`` turns one panel into a
matplotlib figure and ``save_panel`` writes it as PNG and SVG. Figures are built with
``matplotlib.figure.Figure`` rather than pyplot: no screen, no global figure registry to leak.

Layers and heads are numbered from 0, as in ``model.encoder.layers[0]``. An RNN encoder-decoder
has one "layer" of encoder-decoder attention with one "head", its α_ij, and no self-attention:
only its ``cross`` panels are drawn (as Bahdanau et al. 2015, figure 3).

Shapes: B batch, H heads, S source length, T target length, P positions, D model width.
"""

from __future__ import annotations

import io
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from torch import Tensor
from tqdm import tqdm

from ..errors import BadValue
from ..files import write_bytes
from ..model.base import ATTENTION_KINDS, AttentionMaps
from ..model.embeddings import sinusoidal_table

if TYPE_CHECKING:
    from contextlib import AbstractContextManager

    from matplotlib.figure import Figure

KIND_TITLES = {
    "encoder_self": "Encoder self-attention",
    "decoder_self": "Decoder masked self-attention",
    "cross": "Encoder-decoder attention",
}
ANNOTATE_MAX_CELLS = 256  # write the weight in each cell up to 16 x 16 tokens
CELL_INCHES = 0.42  # a heatmap cell's side, labels at 10 pt: up to 57 tokens a side
# The heatmap's longest side, inches: above 57 tokens its cells and labels shrink to fit (an
# SVG zooms back into them). Drawn at 0.42 in, the maps of a 401-token sentence were 18,700
# pixels square: 652 s and 11.4 GB of memory for the figures of one sentence.
MAX_SIDE_INCHES = 24.0
FORMATS = ("png", "svg")


@dataclass(frozen=True)
class Panel:
    """One heatmap: the attention weights of one kind, layer and head (None = head average).

    ``layer`` and ``head`` are indices (from 0); every name and title a person reads counts them
    from 1, as ``transformer info``, the serve page and the step-through view do.
    """

    kind: str
    layer: int
    head: int | None
    matrix: np.ndarray  # (Tq, Tk): row = query, column = key; each row sums to 1
    query_labels: tuple[str, ...]
    key_labels: tuple[str, ...]
    title: str

    @property
    def name(self) -> str:
        """File stem, e.g. ``cross_layer1_head3`` or ``cross_layer1_mean`` (counted from 1)."""
        head = "mean" if self.head is None else f"head{self.head + 1}"
        return f"{self.kind}_layer{self.layer + 1}_{head}"


def _check_index(name: str, value: int | None, count: int, what: str) -> None:
    if value is not None and not 0 <= value < count:
        raise BadValue(f"{name} {value + 1} is out of range: this model has {name}s 1..{count} "
                       f"({what}; counted from 1)")  # fmt: skip


def _labels(labels: Sequence[str], length: int, what: str) -> tuple[str, ...]:
    """Labels for one axis; fewer labels than positions crops the batch's padding away."""
    if not 0 < len(labels) <= length:
        raise ValueError(f"{len(labels)} {what} labels for {length} {what} positions")
    return tuple(labels)


def _check_selection(
    maps: AttentionMaps,
    src_labels: Sequence[str],
    tgt_labels: Sequence[str],
    layer: int | None,
    head: int | None,
    batch_index: int,
) -> tuple[tuple[str, ...], tuple[str, ...], int]:
    """Validates a selection; returns the source labels, target labels and number of heads."""
    batch, n_heads, n_tgt, n_src = maps.decoder[0].cross_attention.shape
    n_layers = max(len(maps.encoder), len(maps.decoder))
    layer_counts = f"{len(maps.encoder)} encoder, {len(maps.decoder)} decoder layers"
    _check_index("layer", layer, n_layers, layer_counts)
    _check_index("head", head, n_heads, f"{n_heads} heads")
    _check_index("batch_index", batch_index, batch, f"batch of {batch}")
    return _labels(src_labels, n_src, "source"), _labels(tgt_labels, n_tgt, "target"), n_heads


def attention_panels(
    maps: AttentionMaps,
    src_labels: Sequence[str],
    tgt_labels: Sequence[str],
    layer: int | None = None,
    head: int | None = None,
    batch_index: int = 0,
    kinds: Sequence[str] = ATTENTION_KINDS,
) -> list[Panel]:
    """One panel per kind, layer and head of a forward pass, with tokens on both axes.

    Args:
        maps: from ``Transformer.attention_maps(src_ids, tgt_ids)``.
        src_labels: source tokens (keys of encoder and encoder-decoder attention).
        tgt_labels: decoder input tokens, <s> + translation (the decoder's queries).
        layer, head: select one layer / head (from 0); None = all.
        batch_index: which sentence of the batch.
        kinds: a subset of ``ATTENTION_KINDS``.
    Shape:
        panel matrices are (S, S), (T, T) and (T, S), cropped to the labelled tokens.
    """
    src, tgt, n_heads = _check_selection(maps, src_labels, tgt_labels, layer, head, batch_index)
    decoder_self = [d.self_attention for d in maps.decoder if d.self_attention is not None]
    per_kind = {  # per-layer (B, H, Tq, Tk) weights, query labels, key labels
        "encoder_self": (maps.encoder, src, src),
        "decoder_self": (decoder_self, tgt, tgt),
        "cross": ([d.cross_attention for d in maps.decoder], tgt, src),
    }
    unknown = [kind for kind in kinds if kind not in per_kind]
    if unknown:
        raise ValueError(
            f"unknown attention kind {unknown[0]!r}; choose from {', '.join(ATTENTION_KINDS)}"
        )
    panels = []
    for kind in kinds:
        layers, queries, keys = per_kind[kind]
        for index, weights in enumerate(layers):
            if layer is not None and index != layer:
                continue
            for h in range(n_heads) if head is None else (head,):
                matrix = weights[batch_index, h, : len(queries), : len(keys)]  # (Tq, Tk)
                title = f"{KIND_TITLES[kind]}, layer {index + 1}, head {h + 1}"
                panels.append(Panel(kind, index, h, _numpy(matrix), queries, keys, title))
    return panels


def mean_cross_attention_panels(
    maps: AttentionMaps,
    src_labels: Sequence[str],
    tgt_labels: Sequence[str],
    layer: int | None = None,
    batch_index: int = 0,
) -> list[Panel]:
    """Encoder-decoder attention averaged over heads, one panel per layer: the alignment.

    Shape:
        panel matrices are (T, S): which source tokens each target position looks at.
    """
    src, tgt, _ = _check_selection(maps, src_labels, tgt_labels, layer, None, batch_index)
    panels = []
    for index, attention in enumerate(maps.decoder):
        if layer is not None and index != layer:
            continue
        weights = attention.cross_attention[batch_index]  # (H, T, S)
        matrix = weights.mean(dim=0)[: len(tgt), : len(src)]  # (T, S)
        title = f"{KIND_TITLES['cross']}, layer {index + 1}, mean of heads"
        panels.append(Panel("cross", index, None, _numpy(matrix), tgt, src, title))
    return panels


def _numpy(weights: Tensor) -> np.ndarray:
    return weights.detach().float().cpu().numpy()


def _text(label: str) -> str:
    """Shown literally: a "$" in a token must not start matplotlib's mathtext."""
    return label.replace("$", r"\$")


def new_figure(figsize: tuple[float, float]) -> Figure:
    """A matplotlib figure. matplotlib is imported here, when a figure is drawn: the commands
    that draw none (``info``, ``translate``) do not wait 0.6 s for it."""
    from matplotlib.figure import Figure

    return Figure(figsize=figsize)


def svg_text() -> AbstractContextManager:
    """matplotlib settings under which SVG text stays text (selectable, and faster to write
    than one path per glyph)."""
    from matplotlib import rc_context

    return rc_context({"svg.fonttype": "none"})


def draw_panel(panel: Panel, annotate: bool = True) -> Figure:
    """The heatmap of one panel: keys on x, queries on y, weights on a fixed 0..1 colour scale.

    Margins are computed from the label lengths instead of by a layout engine: laying the text
    out once more per figure would double the time of writing dozens of figures.
    """
    n_queries, n_keys = panel.matrix.shape
    longest_query = max(len(q) for q in panel.query_labels)
    longest_key = max(len(k) for k in panel.key_labels)
    # Inches: cells are 0.42 in square, fewer for a long sentence (MAX_SIDE_INCHES), and the
    # labels' points shrink with them; a 10 pt character is about 0.085 in wide.
    cell = min(CELL_INCHES, MAX_SIDE_INCHES / max(n_queries, n_keys))
    points = 10 * cell / CELL_INCHES
    char = 0.085 * points / 10
    left, right, top = 0.55 + char * longest_query, 1.25, 0.45
    bottom = 0.5 + char * longest_key
    width = max(left + cell * n_keys + right, 0.075 * len(panel.title) + 0.6)
    height = bottom + cell * n_queries + top
    fig = new_figure(figsize=(width, height))
    ax = fig.add_axes(
        (left / width, bottom / height, 1 - (left + right) / width, 1 - (bottom + top) / height)
    )
    colorbar_axes = fig.add_axes(
        (1 - (right - 0.2) / width, bottom / height, 0.15 / width, 1 - (bottom + top) / height)
    )
    # One colour scale for every panel, so that heads and layers compare at a glance.
    image = ax.imshow(panel.matrix, cmap="viridis", vmin=0.0, vmax=1.0, aspect="auto")
    ax.set_xticks(range(n_keys), [_text(k) for k in panel.key_labels], rotation=90,
                  fontsize=points)  # fmt: skip
    ax.set_yticks(range(n_queries), [_text(q) for q in panel.query_labels], fontsize=points)
    ax.set_xlabel("key")
    ax.set_ylabel("query")
    ax.set_title(_text(panel.title), fontsize=10)
    if annotate and n_queries * n_keys <= ANNOTATE_MAX_CELLS:
        for (i, j), value in np.ndenumerate(panel.matrix):
            colour = "black" if value > 0.6 else "white"  # viridis is light at the top
            ax.text(j, i, f"{value:.2f}", ha="center", va="center", fontsize=7, color=colour)
    fig.colorbar(image, cax=colorbar_axes, label="attention weight")
    return fig


def figure_bytes(fig: Figure, fmt: str = "png", dpi: int = 100) -> bytes:
    """A figure encoded as PNG or SVG bytes."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format=fmt, dpi=dpi)
    return buffer.getvalue()


def _save(fig: Figure, out_dir: str | Path, stem: str, dpi: int) -> list[Path]:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / f"{stem}.{fmt}" for fmt in FORMATS]
    with svg_text():
        for path in paths:  # never half a figure, never through a device (the write gate)
            write_bytes(path, figure_bytes(fig, path.suffix[1:], dpi))
    fig.clear()  # free the artists now rather than at the next garbage collection
    return paths


def save_panel(panel: Panel, out_dir: str | Path, dpi: int = 110) -> list[Path]:
    """Writes ``<out_dir>/<panel.name>.png`` and ``.svg``; returns both paths."""
    return _save(draw_panel(panel), out_dir, panel.name, dpi)


def write_attention_figures(
    maps: AttentionMaps,
    src_labels: Sequence[str],
    tgt_labels: Sequence[str],
    out_dir: str | Path,
    layer: int | None = None,
    head: int | None = None,
    progress: bool = False,
) -> list[Path]:
    """Heatmaps of every selected kind, layer and head, plus the head-averaged alignment.

    Args:
        maps: from ``Transformer.attention_maps`` for one sentence (batch index 0).
        src_labels: source tokens; tgt_labels: decoder input tokens (<s> + translation).
        out_dir: created if missing.
        layer, head: select one (from 0); None = all. The head average is written unless a
            head is selected.
        progress: a progress bar on a terminal (a few dozen figures take seconds).
    Returns:
        the paths written, a PNG and an SVG per figure.
    """
    panels = attention_panels(maps, src_labels, tgt_labels, layer, head)
    if head is None:
        panels += mean_cross_attention_panels(maps, src_labels, tgt_labels, layer)
    shown = progress and sys.stderr.isatty()
    bar = tqdm(panels, desc=f"figures into {out_dir}", unit="figure", disable=not shown)
    return [path for panel in bar for path in save_panel(panel, out_dir)]


@dataclass(frozen=True)
class PositionalData:
    """What the positional-encoding figures show."""

    table: np.ndarray  # (P, D): sinusoidal_table(P, D)
    offsets: tuple[int, ...]  # start positions p of the dot-product curves
    distances: np.ndarray  # (K,): k = 0 .. P - 1 - max(offsets)
    dot_products: np.ndarray  # (len(offsets), K): PE(p)·PE(p + k)


def positional_data(
    d_model: int, max_positions: int, offsets: Sequence[int] | None = None
) -> PositionalData:
    """The encoding table and the dot products PE(p)·PE(p+k) for a few start positions p.

    PE(p)·PE(p+k) = Σ_i cos(k·ω_i) does not depend on p: the curves coincide, which is why a
    fixed linear map can attend by relative position (§3.5).
    """
    if d_model <= 0 or max_positions <= 0:
        raise ValueError(
            f"d_model and max_positions must be positive, got {d_model}, {max_positions}"
        )
    offsets = tuple(sorted({0, max_positions // 4} if offsets is None else set(offsets)))
    _check_index("offset", max(offsets), max_positions, f"{max_positions} positions")
    _check_index("offset", min(offsets), max_positions, f"{max_positions} positions")
    table = sinusoidal_table(max_positions, d_model).double().numpy()  # (P, D)
    distances = np.arange(max_positions - max(offsets))  # (K,)
    dots = np.stack([table[p + distances] @ table[p] for p in offsets])  # (len(offsets), K)
    return PositionalData(table, offsets, distances, dots)


def draw_positional_heatmap(data: PositionalData) -> Figure:
    """Positions (y) by dimensions (x): fast sinusoids on the left, slow ones on the right."""
    n_positions, d_model = data.table.shape
    fig = new_figure(figsize=(7.0, 4.5))
    ax = fig.add_subplot()
    image = ax.imshow(data.table, cmap="RdBu_r", vmin=-1.0, vmax=1.0, aspect="auto")
    ax.set_xlabel("dimension (even: sin, odd: cos)")
    ax.set_ylabel("position")
    ax.set_title(f"Sinusoidal positional encoding, d_model = {d_model}", fontsize=10)
    fig.colorbar(image, ax=ax, label="PE(pos, dim)")
    fig.tight_layout()
    return fig


def draw_positional_dot_products(data: PositionalData) -> Figure:
    """PE(p)·PE(p+k) against the distance k, one curve per start position p."""
    fig = new_figure(figsize=(7.0, 4.0))
    ax = fig.add_subplot()
    for row, p, style in zip(data.dot_products, data.offsets, ("-", "--", ":", "-."), strict=False):
        ax.plot(data.distances, row, style, label=f"p = {p}")
    ax.set_xlabel("distance k")
    ax.set_ylabel("PE(p) · PE(p + k)")
    ax.set_title("The dot product depends only on the distance k", fontsize=10)
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def save_positional_plots(d_model: int, max_positions: int, out_dir: str | Path) -> list[Path]:
    """Writes ``pe_heatmap`` and ``pe_dot_product`` as PNG and SVG; returns the four paths."""
    data = positional_data(d_model, max_positions)
    return _save(draw_positional_heatmap(data), out_dir, "pe_heatmap", 110) + _save(
        draw_positional_dot_products(data), out_dir, "pe_dot_product", 110
    )
