"""Reading the files that come from outside: one bounded, typed reader (``files.py`` writes).

Every JSON or YAML file a command reads goes through here: a model directory's ``config.json``,
``checkpoints/index.json`` and tokenizer tables, the folder-kind markers, a binarized set's
``meta.json``, a run's ``metrics.jsonl``, a Marian folder's ``config.json``,
``generation_config.json``, ``tokenizer_config.json`` and ``vocab.json``, and YAML config files.
Whoever wrote them, the reader

- reads at most ``MAX_BYTES`` (``MAX_YAML_BYTES``) and refuses a longer file: a device or a
  file that keeps growing is cut off there, and a FIFO with no writer reads as empty
  (``read_bytes``, which reads SentencePiece models too);
- refuses nesting deeper than ``MAX_DEPTH``: 100,000 opening brackets were a ``RecursionError``
  in ``json.loads``; now any depth is one line;
- refuses YAML holding more than ``MAX_YAML_VALUES`` values once its aliases are expanded: 500
  bytes of anchors, each a list of nine aliases of the one before, are 9^10 values, which every
  walk over the config (this reader's, a message's ``repr``) took hours over;
- refuses a number that is not finite (``NaN``, ``Infinity``, ``1e999``);
- refuses a YAML mapping that gives a key twice (PyYAML keeps the last one silently);
- returns the top level only when it is what the caller expects (an object, a list).

Its helpers take one value further: ``typed`` converts it to the type a config field has (an
int stays an int; a list where a string belongs is refused), ``in_range`` checks it against a
documented range, ``entry_in`` refuses a name that leaves its folder (``..``, an absolute path,
a link out of it). Every refusal is a one-line ``UserError`` naming the file, the key and the
value.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from .errors import UserError

MAX_BYTES = 64 * 2**20  # JSON, SentencePiece models: a vocab.json of 250,000 pieces is 5 MB
MAX_YAML_BYTES = 2**20  # a config file is a few kB; PyYAML reads 1 MiB in about 5 s here
MAX_DEPTH = 32  # our files nest 3 levels deep, Hugging Face's config.json 3 or 4
MAX_YAML_VALUES = 2**20  # 1 MiB of YAML holds fewer without aliases; a config holds ~100
REQUIRED = object()  # ``typed``'s default: the key must be there

_NAMES = {int: "an integer", float: "a number", str: "a string", bool: "true or false",
          list: "a list", dict: "an object", type(None): "null"}  # fmt: skip


def read_bytes(path: str | Path, limit: int | None = None) -> bytes:
    """The bytes of a file, at most ``limit`` of them (default ``MAX_BYTES``); a missing,
    unreadable or longer file is a UserError naming it. Never blocks on a FIFO that has no
    writer."""
    path, limit = Path(path), MAX_BYTES if limit is None else limit
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # opening a FIFO does not wait
    except FileNotFoundError:
        raise UserError(f"{path} is missing") from None
    except OSError as error:
        raise UserError(f"cannot read {path}: {error.strerror}") from None
    try:
        os.set_blocking(fd, True)
        with open(fd, "rb", closefd=False) as f:
            data = f.read(limit + 1)
    except IsADirectoryError:
        raise UserError(f"{path} is a folder, not a file") from None
    except OSError as error:
        raise UserError(f"cannot read {path}: {error.strerror}") from None
    finally:
        os.close(fd)
    if len(data) > limit:
        most = f"{limit / 2**20:g} MiB" if limit >= 2**20 else f"{limit:,} bytes"
        raise UserError(f"{path} is larger than {most}, the most such a file may hold here; it "
                        "is not read")  # fmt: skip
    return data


def read_json(path: str | Path, kind: type = dict, finite: bool = True) -> Any:
    """The value of a JSON file, bounded and checked (the module's docstring).

    Args:
        kind: what the top level must be: ``dict`` (an object) or ``list``.
        finite: refuse numbers that are not finite (metrics logs may hold a NaN loss).
    """
    return parse_json(read_bytes(path), str(path), kind, finite)


def parse_json(data: bytes | str, origin: str, kind: type = dict, finite: bool = True) -> Any:
    """``read_json`` of text already read (one line of a JSON-lines file, say).

    Args:
        origin: the file (and line) as messages name it.
    """
    try:
        text = data.decode("utf-8") if isinstance(data, bytes) else data
        value = json.loads(text)
    except UnicodeDecodeError as error:
        raise UserError(f"{origin} is not UTF-8 text (byte {error.start})") from None
    except RecursionError:  # the C parser's nesting, deeper than Python's recursion limit
        raise _too_deep(origin) from None
    except json.JSONDecodeError as error:
        raise UserError(f"{origin} is not valid JSON ({error})") from None
    except ValueError as error:  # an integer of over 4,300 digits
        reason = str(error).split(":")[0]
        raise UserError(f"{origin} holds a number too long to read ({reason})") from None
    return checked(value, origin, kind, finite)


class _UniqueKeys(yaml.SafeLoader):
    """``safe_load``'s loader, refusing a key given twice in one mapping (``max_steps: 5`` and
    ``max_steps: 6``: which one was meant?). Keys merged in by ``<<`` may be given again."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        seen: set = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=deep)
            try:
                twice = key in seen
            except TypeError:  # unhashable: the constructor's own error names it
                continue
            if twice:
                raise yaml.constructor.ConstructorError(
                    None,
                    None,
                    f"the key {key!r} is given twice (line {key_node.start_mark.line + 1})",
                    key_node.start_mark,
                )
            seen.add(key)
        return super().construct_mapping(node, deep)


def read_yaml(path: str | Path, name: str | None = None) -> Any:
    """The value of a YAML file (``safe_load``: no objects), bounded as JSON is; an empty file is
    ``{}``. ``name``: the file as messages name it (default: ``path``)."""
    origin = name or str(path)
    data = read_bytes(path, MAX_YAML_BYTES)
    try:
        value = yaml.load(data.decode("utf-8"), Loader=_UniqueKeys)  # noqa: S506 (a SafeLoader)
    except UnicodeDecodeError as error:
        raise UserError(f"{origin} is not UTF-8 text (byte {error.start})") from None
    except RecursionError:
        raise _too_deep(origin) from None
    except yaml.YAMLError as error:
        raise UserError(f"{origin}: not valid YAML: {str(error).splitlines()[0]}") from None
    value = value if value is not None else {}
    return checked(value, origin, object, finite=True, most=MAX_YAML_VALUES)


def checked(value: Any, origin: str, kind: type = object, finite: bool = True,
            most: int | None = None) -> Any:  # fmt: skip
    """``value`` (parsed from ``origin``) if it nests at most ``MAX_DEPTH`` levels, holds only
    finite numbers (with ``finite``), at most ``most`` values (a YAML alias counted as often as
    it is used), and its top level is a ``kind``; else a UserError.

    The walk uses a stack, not recursion, so no depth breaks it."""
    stack: list[tuple[Any, tuple]] = [(value, ())]
    seen = 0
    while stack:
        node, where = stack.pop()
        seen += 1
        if most is not None and seen > most:
            raise UserError(f"{origin} holds more than {most:,} values (counting each use of a "
                            "YAML alias); it is not read")  # fmt: skip
        if isinstance(node, dict | list):
            if len(where) >= MAX_DEPTH:
                raise _too_deep(origin, where[0])
            items = node.items() if isinstance(node, dict) else enumerate(node)
            stack.extend((child, (*where, name)) for name, child in items)
        elif finite and isinstance(node, float) and not math.isfinite(node):
            key = ".".join(str(name) for name in where)
            raise UserError(f"{origin}: {key} = {node}; every number must be finite")
    if kind is not object and not isinstance(value, kind):
        raise UserError(f"{origin}: expected {_NAMES[kind]} at the top level, got "
                        f"{_describe(value)}")  # fmt: skip
    return value


# ------------------------------------------------------------------------- one value further
def typed(values: Mapping, key: str, kind: type | tuple, origin: str, default: Any = REQUIRED):
    """``values[key]`` as ``kind`` (a type or a tuple of them; ``None`` for null), else a
    UserError naming ``origin``, the key and the value. An int is a float where a float is
    expected; a bool is never an int.

    Args:
        default: returned when the key is missing; without one a missing key is an error.
    """
    if key not in values:
        if default is REQUIRED:
            raise UserError(f"{origin}: {key} is missing")
        return default
    value, kinds = values[key], kind if isinstance(kind, tuple) else (kind,)
    kinds = tuple(type(None) if k is None else k for k in kinds)
    if isinstance(value, bool):
        if bool in kinds:
            return value
    elif isinstance(value, int) and int in kinds:
        return value
    elif isinstance(value, int | float) and float in kinds:
        with contextlib.suppress(OverflowError):  # an int of 400 digits is no float
            return float(value)
    elif isinstance(value, kinds) and not isinstance(value, int | float):
        return value
    wanted = " or ".join(_NAMES.get(k, k.__name__) for k in kinds)
    raise UserError(f"{origin}: {key} must be {wanted}, got {_describe(value)}")


def in_range(value: int | float, low: int | float, high: int | float, origin: str, key: str,
             why: str = "") -> int | float:  # fmt: skip
    """``value`` if ``low <= value <= high``, else a UserError naming ``origin``, the key, the
    value and the range (and ``why`` it is that range)."""
    if not low <= value <= high:
        why = f" ({why})" if why else ""
        raise UserError(f"{origin}: {key} = {value:,} is out of range: {low:,} to {high:,}{why}")
    return value


def entry_in(folder: Path, name: object, origin: str, key: str) -> Path:
    """``folder / name`` if ``name`` is a plain name of an entry of ``folder`` that stays in it
    (a link, resolved, too); else a UserError naming ``origin``, the key and the value. Whether
    the entry exists is the caller's business."""
    if not isinstance(name, str):
        raise UserError(f"{origin}: {key} must be the name of an entry in {folder}, got "
                        f"{_describe(name)}")  # fmt: skip
    if name in ("", ".", "..") or "/" in name or "\0" in name:
        raise UserError(f"{origin}: {key} = {name!r} leaves {folder}; it must be the name of an "
                        "entry in that folder")  # fmt: skip
    path = folder / name
    if path.is_symlink() and Path(os.path.realpath(path)).parent != Path(os.path.realpath(folder)):
        raise UserError(f"{origin}: {key} = {name!r} is a link to {os.path.realpath(path)}, "
                        f"outside {folder}; it must be an entry of that folder")  # fmt: skip
    return path


def _too_deep(origin: str, under: object = None) -> UserError:
    where = f" (under {under!r})" if under is not None else ""
    return UserError(f"{origin} nests more than {MAX_DEPTH} levels deep{where}; it is not read")


def _describe(value: object) -> str:
    """A value as messages show it: its repr, cut to 60 characters (a long list or object by
    its length)."""
    if isinstance(value, list | dict) and len(value) > 8:
        return f"{_NAMES[type(value)]} of {len(value):,} entries"
    shown = repr(value)
    return shown if len(shown) <= 60 else f"{shown[:57]}..."
