"""The checks every config dataclass runs in ``__post_init__``: types, finite floats, ranges.

A field whose values have a documented range is declared with ``ranged(default, low, high)``;
``check_ranges`` checks it, and the HTTP API takes its bounds from the same declaration.

A failed check raises ``BadValue`` naming the class, the field and the value: a one-line error
for the command line and a ValueError for Python callers.
"""

from __future__ import annotations

import contextlib
import functools
import math
import typing
from dataclasses import dataclass, field, fields
from typing import Any

from ..errors import BadValue

_MISMATCH = object()


def _type_name(allowed: tuple) -> str:
    return " or ".join(
        "null" if t is type(None) else getattr(t, "__name__", str(t)) for t in allowed
    )


def check_types(obj: object) -> None:
    """Every field holds a value of its annotated type, whoever filled it (YAML, JSON, Python).

    An int where a float is expected becomes a float; so does a string that reads as one (YAML
    1.1 reads ``3e-4``, without a dot, as a string).
    """
    types = _allowed_types(type(obj))
    for f in fields(obj):  # type: ignore[arg-type]
        value, allowed = getattr(obj, f.name), types[f.name]
        converted: object = _MISMATCH
        if value is None:
            converted = None if type(None) in allowed else _MISMATCH
        elif isinstance(value, bool):
            converted = value if bool in allowed else _MISMATCH
        elif isinstance(value, int) and (int in allowed or float in allowed):
            with contextlib.suppress(OverflowError):  # an int of 400 digits is no float
                converted = value if int in allowed else float(value)
        elif (
            isinstance(value, float)
            and float in allowed
            or isinstance(value, str)
            and str in allowed
        ):
            converted = value
        elif isinstance(value, str) and float in allowed:
            with contextlib.suppress(ValueError):
                converted = float(value)
        if converted is _MISMATCH:
            raise BadValue(
                f"{type(obj).__name__}.{f.name} must be {_type_name(allowed)}, got {value!r}"
            )
        if converted is not value:
            object.__setattr__(obj, f.name, converted)


@functools.cache
def _allowed_types(cls: type) -> dict[str, tuple]:
    """Each field's allowed types, read from ``cls``'s annotations once: a config is made for
    every search (``DecodeConfig.with_search``), and ``typing.get_type_hints`` compiles each
    annotation's string anew at every call (about 0.2 ms a search)."""
    hints = typing.get_type_hints(cls)
    return {name: typing.get_args(hint) or (hint,) for name, hint in hints.items()}


def check_finite(obj: object) -> None:
    """Every float field must be a finite number: inf and nan are never meaningful settings."""
    for f in fields(obj):  # type: ignore[arg-type]
        value = getattr(obj, f.name)
        if isinstance(value, float) and not math.isfinite(value):
            raise BadValue(f"{type(obj).__name__}.{f.name} must be a finite number, got {value!r}")


def check_sizes(obj: object, limits: dict[str, int]) -> None:
    """Every field named in ``limits`` is an integer from 1 to its limit."""
    for name, high in limits.items():
        value = getattr(obj, name)
        if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= high:
            raise BadValue(f"{type(obj).__name__}.{name} must be an integer from 1 to {high:,}, "
                           f"got {value!r}")  # fmt: skip


def check_positive(obj: object, *names: str) -> None:
    for name in names:
        value = getattr(obj, name)
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            raise BadValue(f"{type(obj).__name__}.{name} must be a positive integer, got {value!r}")


# numpy's range of seeds; torch's generator takes 64 bits, and the data order seed * 100,003
MAX_SEED = 2**32 - 1


def check_seeds(obj: object, *names: str) -> None:
    """Every field named is an integer from 0 to ``MAX_SEED`` (2**63 was a traceback from
    torch's generator, after the run had begun)."""
    for name in names:
        value = getattr(obj, name)
        if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= MAX_SEED:
            raise BadValue(f"{type(obj).__name__}.{name} must be an integer from 0 to "
                           f"{MAX_SEED:,}, got {value!r}")  # fmt: skip


def check_probability(obj: object, *names: str) -> None:
    for name in names:
        value = getattr(obj, name)
        if not 0.0 <= value < 1.0:
            raise BadValue(f"{type(obj).__name__}.{name} must be in [0, 1), got {value!r}")


@dataclass(frozen=True)
class Range:
    """The values a number may take: [low, high], or (low, high] with ``open_low``."""

    low: float
    high: float
    open_low: bool = False

    def __contains__(self, value: object) -> bool:
        if not isinstance(value, int | float) or isinstance(value, bool):
            return False
        above = value > self.low if self.open_low else value >= self.low
        return above and value <= self.high

    def __str__(self) -> str:
        return f"{'(' if self.open_low else '['}{_number(self.low)}, {_number(self.high)}]"

    def schema(self) -> dict[str, float]:
        """The same bounds as pydantic's ``Field`` keywords (``gt``/``ge`` and ``le``)."""
        return {"gt" if self.open_low else "ge": self.low, "le": self.high}


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


def ranged(default: float, low: float, high: float, open_low: bool = False) -> Any:
    """A dataclass field with a default and the range its values must lie in: the range is
    stated once, here, and read by ``check_ranges`` and by whoever needs the bounds (``range_of``:
    the HTTP API's schema)."""
    return field(default=default, metadata={"range": Range(low, high, open_low)})


def range_of(cls: type, name: str) -> Range:
    """The range of field ``name`` of dataclass ``cls``, as ``ranged`` declared it."""
    return next(f.metadata["range"] for f in fields(cls) if f.name == name)  # type: ignore[arg-type]


def check_ranges(obj: object) -> None:
    """Every field declared with ``ranged`` holds a value within its range."""
    for f in fields(obj):  # type: ignore[arg-type]
        allowed, value = f.metadata.get("range"), getattr(obj, f.name)
        if allowed is not None and value not in allowed:
            raise BadValue(f"{type(obj).__name__}.{f.name} must be in {allowed}, got {value!r}")
