"""What a library caller hands the engines, checked where it comes in: texts are a list of
strings, each Unicode text; token ids are integers inside the vocabulary; a search is a
``DecodeConfig`` and a runtime a ``RuntimeConfig``.

The command line reads its texts from UTF-8 files and makes its own ids and configs, so these
checks are for Python callers, for whom a mistake otherwise came out as an ``AttributeError``
or an ``IndexError`` deep inside, or as silently wrong output: a string given for a list of
them was translated character by character. ``tests/test_library_inputs.py`` finds every public
parameter of texts or ids by its signature and fails until a wrong call of it is refused.
"""

from __future__ import annotations

from collections.abc import Sequence
from numbers import Integral

from ..config import DecodeConfig, RuntimeConfig
from ..errors import BadValue
from ..vocab import PAD_ID


def lone_surrogate(text: str) -> int | None:
    """Where ``text`` holds a lone surrogate (``"\\ud800"``, which JSON and Python strings may
    hold but is no character, so no tokenizer can read it), or None."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        return error.start
    return None


def check_texts(values: object, what: str, several: bool = False) -> None:
    """``values`` is a list (or tuple) of strings, each Unicode text; with ``several``, an item
    may also be a list of them (a sentence's references).

    Raises:
        TypeError: a string, bytes or anything else for the list; an item that is no string.
        BadValue: an item holding a lone surrogate.
    """
    if isinstance(values, (str, bytes)) or not isinstance(values, Sequence):
        raise TypeError(f"{what} must be a list of strings, got {type(values).__name__}")
    for i, value in enumerate(values):
        if several and isinstance(value, (list, tuple)):
            check_texts(value, f"{what}[{i}]")
        else:
            check_text(value, f"{what}[{i}]")


def check_text(value: object, what: str) -> None:
    """``value`` is a string of Unicode text (``check_texts`` for one)."""
    if not isinstance(value, str):
        raise TypeError(f"{what} must be a string, got {type(value).__name__}")
    at = lone_surrogate(value)
    if at is not None:
        raise BadValue(f"{what} holds a lone surrogate (at character {at}), which is not a "
                       "Unicode character")  # fmt: skip


def check_ids(sequences: Sequence[Sequence[int]], vocab_size: int, what: str) -> None:
    """Token ids as a search or scoring takes them: integers in [0, ``vocab_size``), never
    ``PAD_ID`` (they go unpadded). An id past the vocabulary stopped in the embedding with
    "index out of range in self"; a float was cut to an integer without a word.

    Raises:
        TypeError: an id that is no integer.
        ValueError: an id outside the vocabulary, or the padding id; ``what`` i names it.
    """
    for i, ids in enumerate(sequences):
        try:  # a sum is an integer only where every id is one: C's speed, not an isinstance each
            whole = isinstance(sum(ids), Integral)
        except TypeError:  # a string, None, ...
            whole = False
        if not whole:
            wrong = next(token for token in ids if not isinstance(token, Integral))
            raise TypeError(f"{what} {i}: ids are integers, got {type(wrong).__name__} {wrong!r}")
        if ids and not 0 <= min(ids) <= max(ids) < vocab_size:
            wrong = next(token for token in ids if not 0 <= token < vocab_size)
            raise ValueError(f"{what} {i}: id {wrong} is outside the vocabulary (0 to "
                             f"{vocab_size - 1})")  # fmt: skip
        if PAD_ID in ids:
            raise ValueError(f"{what} {i} contains the padding id {PAD_ID}")


def check_runtime(runtime: object) -> None:
    """``runtime`` is a ``RuntimeConfig`` (a dict stopped inside with an AttributeError)."""
    if not isinstance(runtime, RuntimeConfig):
        raise TypeError(f"runtime must be a RuntimeConfig (e.g. RuntimeConfig(device='cpu')), "
                        f"got {type(runtime).__name__}")  # fmt: skip


def search_of(decode: object, default: DecodeConfig) -> DecodeConfig:
    """``decode``, or the engine's ``default`` where it is None; anything else is a TypeError."""
    if decode is None:
        return default
    if not isinstance(decode, DecodeConfig):
        raise TypeError(f"decode must be a DecodeConfig (e.g. engine.decode.with_search("
                        f"beam_size=2)), got {type(decode).__name__}")  # fmt: skip
    return decode
