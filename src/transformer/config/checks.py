"""The checks every config dataclass runs in ``__post_init__``: types, finite floats, ranges.

A failed check raises ``BadValue`` naming the class, the field and the value: a one-line error
for the command line and a ValueError for Python callers.
"""

from __future__ import annotations

import contextlib
import math
import typing
from dataclasses import fields

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
    hints = typing.get_type_hints(type(obj))
    for f in fields(obj):  # type: ignore[arg-type]
        value, allowed = getattr(obj, f.name), typing.get_args(hints[f.name]) or (hints[f.name],)
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


def check_probability(obj: object, *names: str) -> None:
    for name in names:
        value = getattr(obj, name)
        if not 0.0 <= value < 1.0:
            raise BadValue(f"{type(obj).__name__}.{name} must be in [0, 1), got {value!r}")
