"""Parameter counts per part of the model, in the notes' vocabulary (``transformer info``).

The model is built on PyTorch's meta device, which records shapes and allocates nothing; sizes
whose float32 weights would not fit in this machine's free memory are refused first, as in every
command that builds a model (``model/build.py``).
"""

from __future__ import annotations

from torch import nn

from ..config import ModelConfig
from ..model.base import EncoderDecoder
from ..model.build import shapes_only


def _count(module: nn.Module, seen: set[int]) -> int:
    """Parameters of ``module`` not already counted (shared tables count once)."""
    total = 0
    for p in module.parameters():
        if id(p) not in seen:
            seen.add(id(p))
            total += p.numel()
    return total


def parameter_table(model: EncoderDecoder) -> list[tuple[str, int]]:
    """(part, parameter count) rows in the order of the model's ``parts`` (Figure 1, or the
    RNN's data flow); the last row is the total."""
    seen: set[int] = set()
    rows = [(part, sum(_count(module, seen) for module in modules))
            for part, modules in model.parts()]  # fmt: skip
    return [*rows, ("total", sum(count for _, count in rows))]


def format_table(rows: list[tuple[str, int]], head: str) -> str:
    """The table as text, with ``head`` (the model's sizes in one line) on top."""
    width = max(len(name) for name, _ in rows)
    lines = [head, ""]
    for name, count in rows:
        if name == "total":
            lines.append("-" * (width + 14))
        lines.append(f"{name:<{width}}  {count:>12,}")
    total = rows[-1][1]
    lines.append(f"{'':<{width}}  {total / 1e6:>11.2f}M")
    return "\n".join(lines)


def describe(config: ModelConfig) -> str:
    """The parameter table of a model built from ``config`` (``transformer info``), built on the
    meta device; sizes that would not fit in free memory are refused (``shapes_only``)."""
    model = shapes_only(config)
    return format_table(parameter_table(model), model.summary)
