"""The lecture notes' worked examples, recomputed step by step with the real modules.

Each topic is a list of ``Step``s: a title, the matrix of that step (computed, never typed in),
row and column labels, the formula, and, where the notes print something else, a ``notes`` line
saying what they print and why it is wrong. ``render`` turns steps into aligned terminal text, so
the numbers stay data that tests can check against independent formulas.

Shapes: T tokens (rows are queries), D model width (4 in every example of the notes).
"""

from __future__ import annotations

import math
import textwrap
import unicodedata
from dataclasses import dataclass

import torch
from torch import Tensor

from ..model.attention import attention_reference, identity_attention
from ..model.embeddings import sinusoidal_table
from ..model.layers import LayerNorm
from ..model.masks import combined_mask, look_ahead_mask, padding_mask

TOPICS: tuple[str, ...] = ("attention", "scaling", "layernorm", "positional", "masks")

TOPIC_TITLES = {
    "attention": 'Self-attention of "The CAT SAT" (W_Q = W_K = W_V = W_O = I, d_k = 4)',
    "scaling": "Why divide by √d_k: softmax saturation",
    "layernorm": "Layer normalisation of [2, 4, 6, 8]",
    "positional": "Sinusoidal positional encodings, d_model = 4",
    "masks": "Decoder masking: 4 target tokens, the last one padding",
}


@dataclass(frozen=True)
class Step:
    """One step of a worked example: a labelled matrix, how it was computed, what the notes say.

    ``matrix`` is 2-D (a vector is one row); boolean masks are shown as 1/0 and -inf as "-inf".
    """

    title: str
    matrix: Tensor
    row_labels: tuple[str, ...] = ()
    col_labels: tuple[str, ...] = ()
    formula: str = ""
    notes: str = ""  # where the lecture notes print a different number, and why
    decimals: int = 4

    def __post_init__(self) -> None:
        if self.matrix.dim() != 2:
            raise ValueError(f"step {self.title!r}: matrix must be 2-D, got {self.matrix.dim()}-D")
        rows, cols = self.matrix.shape
        if self.row_labels and len(self.row_labels) != rows:
            raise ValueError(f"step {self.title!r}: {len(self.row_labels)} row labels, {rows} rows")
        if self.col_labels and len(self.col_labels) != cols:
            raise ValueError(f"step {self.title!r}: {len(self.col_labels)} col labels, {cols} cols")


def _fmt(values: list[float]) -> str:
    """[0.4223, 0.1554] in the notes' bracket style, 4 decimals."""
    return "[" + ", ".join(f"{v:.4f}" for v in values) + "]"


# The notes' "The", "CAT", "SAT" embedded in 4 dimensions (seed 004).
TOKENS = ("The", "CAT", "SAT")
THE_CAT_SAT = torch.tensor([[1.0, 0, 1, 0], [0, 1, 0, 1], [1, 1, 1, 1]])
DIMS = ("d0", "d1", "d2", "d3")


def attention_steps() -> list[Step]:
    """Q, K, V, scores, scaling, softmax and weighted sum for "The CAT SAT"."""
    mha = identity_attention(d_model=4, n_heads=1)
    x = THE_CAT_SAT[None]  # (1, T, D)
    with torch.no_grad():
        q, k, v = mha.w_q(x)[0], mha.w_k(x)[0], mha.w_v(x)[0]  # (T, D) each
        out, weights = mha(x, x, x, need_weights=True)  # (1, T, D), (1, 1, T, T)
    scores = q @ k.T  # (T, T)
    scaled = scores / math.sqrt(q.size(-1))
    weights, out = weights[0, 0], out[0]
    labels = {"row_labels": TOKENS, "col_labels": TOKENS}
    return [
        Step("Token embeddings X", THE_CAT_SAT, TOKENS, DIMS, "one row per token", decimals=0),
        Step("Queries Q = X·W_Q", q, TOKENS, DIMS, "W_Q = I, so Q = X", decimals=0),
        Step("Keys K = X·W_K", k, TOKENS, DIMS, "W_K = I, so K = X", decimals=0),
        Step("Values V = X·W_V", v, TOKENS, DIMS, "W_V = I, so V = X", decimals=0),
        Step("Scores Q·Kᵀ", scores, **labels, formula="row = query, column = key", decimals=0),
        Step("Scaled scores Q·Kᵀ/√d_k", scaled, **labels, formula="√d_k = √4 = 2", decimals=0),
        Step(
            "Attention weights softmax(Q·Kᵀ/√d_k)",
            weights,
            **labels,
            formula="softmax along each row: every row sums to 1",
            notes=(
                "softmax([0, 2, 2]) and softmax([2, 2, 4]) for CAT and SAT: the unscaled "
                "scores, though the values printed are those of the scaled ones. 0.5762 for "
                f"SAT→SAT, which is {weights[2, 2].item():.5f}, so {weights[2, 2].item():.4f}"
            ),
        ),
        Step(
            "Output = weights·V",
            out,
            TOKENS,
            DIMS,
            formula="each output row is a weighted average of the value rows",
            notes=(
                '[1.2669, 0.9999, 1.2669, 0.9999] for "The", an addition slip (3 × 0.4223, and '
                f"the sum of the three weights); the output is {_fmt(out[0].tolist())}. A "
                "weighted average of 0/1 vectors cannot exceed 1"
            ),
        ),
    ]


def scaling_steps() -> list[Step]:
    """The notes' Q = [2, 3, 4, 1] against K1 = [1, 0, 1, 0] and K2 = [0, 1, 0, 1]."""
    q = torch.tensor([[[[2.0, 3, 4, 1]]]])  # (1, 1, 1, D)
    k = torch.tensor([[[[1.0, 0, 1, 0], [0, 1, 0, 1]]]])  # (1, 1, 2, D)
    raw = (q @ k.transpose(-2, -1))[0, 0]  # (1, 2)
    scaled = raw / math.sqrt(q.size(-1))
    _, weights = attention_reference(q, k, k)  # the scaled path: (1, 1, 1, 2)
    labels = {"row_labels": ("Q",), "col_labels": ("K1", "K2")}
    return [
        Step("Raw scores Q·Kᵀ", raw, **labels, formula="2·1 + 4·1 = 6, 3·1 + 1·1 = 4", decimals=0),
        Step(
            "softmax without scaling",
            raw.softmax(dim=-1),
            **labels,
            formula="1/(1+e⁻²): most of the weight on one key, gradients vanish (saturation)",
        ),
        Step(
            "Scaled scores Q·Kᵀ/√d_k",
            scaled,
            **labels,
            formula="d_k = 4, √d_k = 2",
            decimals=0,
            notes=(
                f"[6/√2, 4/√2] = [3, 2], but 6/√2 = {6 / math.sqrt(2):.4f}: the division "
                "is by √d_k = √4 = 2"
            ),
        ),
        Step(
            "softmax with scaling",
            weights[0, 0],
            **labels,
            formula="1/(1+e⁻¹): more balanced weights",
        ),
    ]


def layernorm_steps() -> list[Step]:
    """The notes' four steps of layer normalisation, then the real ``LayerNorm`` module."""
    x = torch.tensor([[2.0, 4.0, 6.0, 8.0]])  # (1, D)
    norm = LayerNorm(4, eps=1e-5)
    mean = x.mean(dim=-1, keepdim=True)  # (1, 1)
    var = x.var(dim=-1, unbiased=False, keepdim=True)  # divide by D, as LayerNorm does
    std = torch.sqrt(var + norm.eps)
    with torch.no_grad():
        y = norm(x)  # γ = 1, β = 0: y = x̂
        norm.gamma.fill_(2.0)
        norm.beta.fill_(1.0)
        y_scaled = norm(x)
    row = {"row_labels": ("x",)}
    return [
        Step("Input x", x, **row, col_labels=DIMS, decimals=1),
        Step("Mean μ", mean, ("μ",), formula="μ = (2 + 4 + 6 + 8)/4"),
        Step("Variance σ²", var, ("σ²",), formula="σ² = mean of (x_i - μ)², divided by D"),
        Step("Standard deviation √(σ² + ε)", std, ("√(σ²+ε)",), formula="ε = 1e-5 avoids 1/0"),
        Step("Normalise x̂ = (x - μ)/√(σ² + ε)", (x - mean) / std, ("x̂",), DIMS),
        Step("Scale and shift y = γ·x̂ + β", y, ("y",), DIMS, "γ = 1, β = 0 (initial): y = x̂"),
        Step("Scale and shift, γ = 2, β = 1", y_scaled, ("y",), DIMS, "γ and β are learned"),
    ]


def positional_steps() -> list[Step]:
    """Angles and sinusoidal encodings of positions 0..3, and the notes' embedding + PE."""
    d_model, n_positions = 4, 4
    pe = sinusoidal_table(n_positions, d_model)  # (P, D)
    positions = tuple(f"pos {p}" for p in range(n_positions))
    two_i = torch.arange(0, d_model, 2, dtype=torch.float64)  # (D/2,)
    angles = torch.arange(n_positions, dtype=torch.float64)[:, None] / 10000 ** (two_i / d_model)
    pe_cols = tuple(f"{j} {'sin' if j % 2 == 0 else 'cos'}" for j in range(d_model))
    # The notes' embeddings for the figure; CAT is written [0.5, 0.1, 0.7, 0.8] once, then
    # [0.5, 0.6, 0.7, 0.8] in the figure, which is the one used here.
    emb = torch.tensor([[0.1, 0.2, 0.3, 0.4], [0.5, 0.6, 0.7, 0.8], [0.9, 1.0, 1.1, 1.2]])
    return [
        Step(
            "Angles pos/10000^(2i/d_model)",
            angles,
            positions,
            ("i=0", "i=1"),
            formula="one frequency per pair of dimensions (2i, 2i+1)",
        ),
        Step(
            "PE(pos, 2i) = sin(angle), PE(pos, 2i+1) = cos(angle)",
            pe,
            positions,
            pe_cols,
            formula="dimensions 2i and 2i+1 share one angle",
            notes=(
                "10000^(1/4) in PE(1, 1), an exponent (2i+1)/d_model; both dimensions of a "
                f"sin/cos pair use 2i/d_model (their value cos(1) = {pe[1, 1].item():.4f} is "
                f"right). The figure shows 0.39 for PE(1, 3) = cos(0.01) = {pe[1, 3].item():.5f}"
            ),
            decimals=5,
        ),
        Step(
            "Embedding + PE (the input of the encoder)",
            emb + pe[:3],
            TOKENS,
            DIMS,
            formula="The at pos 0, CAT at pos 1, SAT at pos 2",
            notes="CAT as [0.5, 0.1, 0.7, 0.8] once, as [0.5, 0.6, 0.7, 0.8] in the figure",
        ),
    ]


def mask_steps() -> list[Step]:
    """Padding, look-ahead and combined masks and the masked softmax of the 4-token example."""
    tokens = ("y1", "y2", "y3", "<pad>")
    ids = torch.tensor([[1, 2, 3, 0]])  # the notes' [1, 2, 3, 0]; id 0 is padding
    x = torch.tensor(
        [[0.1, 0.2, 0.3, 0.4], [0.5, 0.6, 0.7, 0.8], [0.9, 1.0, 1.1, 1.2], [0.0, 0.0, 0.0, 0.0]]
    )  # (T, D); Q = K = V = x since W = I
    raw = x @ x.T  # (T, T)
    scaled = raw / math.sqrt(x.size(-1))
    mask = combined_mask(ids)[0, 0]  # (T, T)
    masked = scaled.masked_fill(~mask, float("-inf"))
    out, weights = attention_reference(x[None, None], x[None, None], x[None, None], mask)
    unscaled_row = raw[1, :2].softmax(dim=-1).tolist()
    labels = {"row_labels": tokens, "col_labels": tokens}
    return [
        Step("Q = K = V (embeddings, PE taken as 0)", x, tokens, DIMS, decimals=1),
        Step(
            "Raw scores Q·Kᵀ",
            raw,
            **labels,
            notes=(
                '"Q·Kᵀ/2" for this matrix, which is not divided, and 1.9, 3.1, 5.1 for '
                f"{raw[1, 1].item():.2f}, {raw[1, 2].item():.2f}, {raw[2, 2].item():.2f}"
            ),
        ),
        Step("Scaled scores Q·Kᵀ/√d_k", scaled, **labels, formula="√d_k = 2"),
        Step(
            "Padding mask (keys)",
            padding_mask(ids)[0, 0],
            ("all",),
            tokens,
            formula="1 = may attend; the same row for every query",
            notes=(
                "a 2-D padding mask whose <pad> row is all 0, yet a combined mask whose <pad> "
                "row is [1, 1, 1, 0], as here (a fully blocked row would have no softmax)"
            ),
        ),
        Step("Look-ahead mask", look_ahead_mask(4)[0, 0], **labels, formula="key ≤ query"),
        Step("Combined mask", mask, **labels, formula="look-ahead AND padding (element-wise)"),
        Step(
            "Masked scaled scores",
            masked,
            **labels,
            formula="blocked entries become -inf, so e^-inf = 0 after softmax",
            notes="the unscaled scores here, with the same slips 1.9, 3.1, 5.1",
        ),
        Step(
            "Attention weights softmax(masked scores)",
            weights[0, 0],
            **labels,
            notes=(
                f"[0.3, 0.7] for y2, but {_fmt(weights[0, 0, 1, :2].tolist())} rounds to "
                "[0.4, 0.6]; [0.3, 0.7] is the softmax of the unscaled scores, "
                f"{_fmt(unscaled_row)}. [1, 0, 0, 0] for <pad>, which contradicts their masked "
                "scores [0, 0, 0, -inf]: three equal scores share equally"
            ),
        ),
        Step("Output = weights·V", out[0, 0], tokens, DIMS),
    ]


_WALKTHROUGHS = {
    "attention": attention_steps,
    "scaling": scaling_steps,
    "layernorm": layernorm_steps,
    "positional": positional_steps,
    "masks": mask_steps,
}


def walkthrough(topic: str) -> list[Step]:
    """The steps of one topic from ``TOPICS``; ValueError for an unknown topic."""
    if topic not in _WALKTHROUGHS:
        raise ValueError(f"unknown topic {topic!r}; choose from {', '.join(TOPICS)}")
    return _WALKTHROUGHS[topic]()


_BOLD, _DIM, _CYAN, _YELLOW = "\033[1m", "\033[2m", "\033[36m", "\033[33m"


def _paint(text: str, code: str, color: bool) -> str:
    return f"{code}{text}\033[0m" if color else text


def format_value(value: float | bool, decimals: int) -> str:
    """One matrix entry as the renderer prints it: 1/0 for masks, -inf, fixed decimals."""
    if isinstance(value, bool):
        return str(int(value))
    if math.isinf(value):
        return "-inf" if value < 0 else "inf"
    text = f"{value:.{decimals}f}"
    return text[1:] if text.startswith("-") and float(text) == 0 else text  # no "-0.0000"


def _width(text: str) -> int:
    """Columns a label takes in a terminal: combining marks (the hat of x̂) take none."""
    return sum(not unicodedata.combining(ch) for ch in text)


def _pad(text: str, width: int, right: bool = False) -> str:
    fill = " " * max(width - _width(text), 0)
    return fill + text if right else text + fill


def render_matrix(step: Step, color: bool = False) -> list[str]:
    """The aligned rows of a step's matrix, with labels; entries right-aligned in columns."""
    cells = [[format_value(v, step.decimals) for v in row] for row in step.matrix.tolist()]
    rows = step.row_labels or tuple("" for _ in cells)
    label_width = max(_width(label) for label in rows)
    width = max(len(c) for row in cells for c in row)
    width = max([width, *(_width(label) for label in step.col_labels)])

    lines = []
    if step.col_labels:
        header = "  ".join(_pad(label, width, right=True) for label in step.col_labels)
        lines.append(" " * label_width + "  " + _paint(header, _CYAN, color))
    for label, row in zip(rows, cells, strict=True):
        # Blocked entries (-inf, mask 0) fade, so that the allowed pattern stands out.
        entries = [_paint(c.rjust(width), _DIM, color and c in ("-inf", "0")) for c in row]
        lines.append(_paint(_pad(label, label_width), _CYAN, color) + "  " + "  ".join(entries))
    return lines


def render(steps: list[Step], color: bool = False) -> str:
    """Numbered steps: title, formula, the matrix, and a "notes:" line where the notes differ."""
    lines: list[str] = []
    for number, step in enumerate(steps, start=1):
        lines.append(_paint(f"Step {number}. {step.title}", _BOLD, color))
        if step.formula:
            lines.append(f"  {step.formula}")
        lines.extend("  " + line for line in render_matrix(step, color))
        if step.notes:
            # The lines that correct the notes stand out, wrapped to fit an 80-column terminal.
            wrapped = textwrap.wrap(
                step.notes, width=78, initial_indent="  notes: ", subsequent_indent=" " * 9
            )
            lines.extend(_paint(line, _YELLOW, color) for line in wrapped)
        lines.append("")
    return "\n".join(lines)


def explain(topic: str | None = None, color: bool = False) -> str:
    """The worked examples of the notes as terminal text.

    Args:
        topic: one of ``TOPICS``, or None for all of them in order.
        color: ANSI colours (titles, labels, notes lines); pass True only for a terminal.
    """
    topics = TOPICS if topic is None else (topic,)
    sections = []
    for name in topics:
        steps = walkthrough(name)
        heading = _paint(f"== {name}: {TOPIC_TITLES[name]} ==", _BOLD, color)
        sections.append(f"{heading}\n\n{render(steps, color)}")
    return "\n".join(sections).rstrip("\n") + "\n"
