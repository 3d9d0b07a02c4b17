"""Damaged copies of JSON files, drawn by Hypothesis: what the property-based tests of files from
outside (tests/test_files_fuzz.py) do to a model directory's and a Marian folder's JSON files.

A ``Mutation`` is one change to one file, applied in place:

- ``set``: a value anywhere in the file (the top level too) replaced by another: of another type,
  a number huge, tiny, negative, zero or not finite, a string where a number goes (and a number
  written as a string), a path that leaves the folder or names another model, a long string, a
  long list, JSON nested 100,000 levels deep;
- ``delete``: a key of an object (or an item of a list) removed; ``add``: a key added;
- ``truncate``: the file cut after its first N bytes; ``text``: the file replaced by other bytes
  (empty, not UTF-8, not JSON, a bare number, ...);
- ``link``: the file replaced by a symbolic link (to a file elsewhere, to a folder, to nothing,
  to itself, to ``/dev/null``); ``missing``: the file removed; ``fifo``: a named pipe in its
  place; ``large``: a file of zeros over the 64 MiB the reader accepts (sparse: no disk used).

Values that ``json.dumps`` cannot write (NaN, 10^5000, deep nesting) are written as raw JSON text
(``Raw``). A path value may name ``ELSEWHERE``: a folder beside the one being damaged (another
model's checkpoint, say), filled in when the mutation is applied.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

ELSEWHERE = "{elsewhere}"  # replaced by the folder beside the damaged one, when applied
DEEP = 100_000  # opening brackets: json.loads's RecursionError before the reader's depth limit


@dataclass(frozen=True)
class Raw:
    """JSON text written as it is (what ``json.dumps`` cannot write)."""

    text: str

    def __repr__(self) -> str:
        return f"Raw({self.text[:24]!r}{'...' if len(self.text) > 24 else ''})"


RAWS = [
    Raw("NaN"), Raw("Infinity"), Raw("-Infinity"), Raw("1e999"), Raw("-1e999"), Raw("1e-400"),
    Raw("-0"), Raw("1" + "0" * 5000), Raw("[" * DEEP + "]" * DEEP), Raw('{"a":' * DEEP + "1" +
    "}" * DEEP), Raw("[" * 40 + "]" * 40),
]  # fmt: skip

NUMBERS = st.one_of(
    st.sampled_from([0, 1, -1, 2, 3, 7, 255, 2**31, 2**53 + 1, 2**63, -(2**63), 2**64]),
    st.integers(-(10**6), 10**6),
    st.integers(min_value=1, max_value=30).map(lambda k: 10**k),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from([0.0, -0.0, 0.5, -0.5, 1e-300, 5e-324, 1e300, -1e300, 1.5, 65536.5]),
)
STRINGS = st.one_of(
    st.sampled_from([
        "", "abc", "12", "1e300", "nan", "inf", "true", "null", "..", ".", "../x", "a/b",
        "/etc/passwd", "/dev/zero", "~", "\u00e9", "a\u0000b", "x" * 100_000,
        ELSEWHERE, f"{ELSEWHERE}/model.safetensors", "../../elsewhere", "step_00000000",
        "relu", "swish", "transformer", "rnn", "huggingface", "<pad>", "</s>",
    ]),
    st.text(max_size=12),
)  # fmt: skip
CONTAINERS = st.sampled_from([[], [1], ["a"], [None], {}, {"a": 1}, {"": None}, list(range(5000))])
VALUES = st.one_of(
    NUMBERS, STRINGS, CONTAINERS, st.booleans(), st.none(), st.sampled_from(RAWS),
    NUMBERS.map(str),  # a number where a string goes is covered above; here the reverse
)  # fmt: skip
TEXTS = st.sampled_from([
    b"", b" ", b"\n", b"null", b"[]", b"{}", b"42", b'"config"', b"\xff\xfe\x00", b"{", b"{]",
    b'{"a": 1} {"b": 2}', b"\xef\xbb\xbf{}", b"// a comment\n{}",
])  # fmt: skip
LINKS = st.sampled_from(["elsewhere", "folder", "dangling", "itself", "/dev/null"])


@dataclass(frozen=True)
class Mutation:
    """One change to one file (the module docstring says which)."""

    kind: str
    path: tuple = ()  # the key path of the value changed (set, delete, add)
    value: Any = None  # the new value (set, add), the byte count (truncate), the text, the link

    def apply(self, file: Path, elsewhere: Path) -> None:
        """Changes ``file`` in place; ``elsewhere`` fills in ``ELSEWHERE``."""
        if self.kind in ("set", "delete", "add"):
            value = json.loads(file.read_text())
            changed = edit(value, self.path, self.kind, self.value)
            file.write_text(dumps(changed, str(elsewhere)))
        elif self.kind == "truncate":
            data = file.read_bytes()
            file.write_bytes(data[: self.value % max(len(data), 1)])
        elif self.kind == "text":
            file.write_bytes(self.value)
        elif self.kind == "large":
            file.unlink()
            with open(file, "wb") as f:
                f.truncate(64 * 2**20 + 1)
        elif self.kind == "missing":
            file.unlink()
        elif self.kind == "fifo":
            file.unlink()
            os.mkfifo(file)
        elif self.kind == "link":
            target = {
                "elsewhere": elsewhere / file.name,
                "folder": elsewhere,
                "dangling": file.parent / "nothing-here",
                "itself": file,
                "/dev/null": Path("/dev/null"),
            }[self.value]
            file.unlink()
            file.symlink_to(target)
        else:
            raise AssertionError(self.kind)


def key_paths(value: Any, path: tuple = ()) -> list[tuple]:
    """The key path of every value in ``value``, the top level first (long lists: 3 items)."""
    found = [path]
    if isinstance(value, dict):
        for key, child in value.items():
            found += key_paths(child, (*path, key))
    elif isinstance(value, list):
        for i, child in enumerate(value[:3]):
            found += key_paths(child, (*path, i))
    return found


def edit(value: Any, path: tuple, kind: str, new: Any) -> Any:
    """``value`` with the value at ``path`` replaced (set), removed (delete), or given a key
    (add: ``new`` is (key, value)); a path into something no longer a container sets it."""
    if not path:
        if kind == "set":
            return new
        if kind == "add" and isinstance(value, dict):
            return {**value, new[0]: new[1]}
        if kind == "add" and isinstance(value, list):
            return [*value, new[1]]
        return value if kind == "add" else None  # deleting the top level leaves null
    head, *rest = path
    if isinstance(value, dict) and head in value:
        if not rest and kind == "delete":
            return {k: v for k, v in value.items() if k != head}
        return {**value, head: edit(value[head], tuple(rest), kind, new)}
    if isinstance(value, list) and isinstance(head, int) and head < len(value):
        if not rest and kind == "delete":
            return value[:head] + value[head + 1 :]
        return [*value[:head], edit(value[head], tuple(rest), kind, new), *value[head + 1 :]]
    return value


def dumps(value: Any, elsewhere: str) -> str:
    """``value`` as JSON text, ``Raw`` values written as they are, ``ELSEWHERE`` filled in."""
    raws: list[str] = []

    def placeholders(v: Any) -> Any:
        if isinstance(v, Raw):
            raws.append(v.text)
            return f"@@raw{len(raws) - 1}@@"
        if isinstance(v, str):
            return v.replace(ELSEWHERE, elsewhere)
        if isinstance(v, dict):
            return {k: placeholders(c) for k, c in v.items()}
        if isinstance(v, list):
            return [placeholders(c) for c in v]
        return v

    text = json.dumps(placeholders(value), indent=1)
    for i, raw in enumerate(raws):
        text = text.replace(f'"@@raw{i}@@"', raw)
    return text


@st.composite
def mutations(draw: st.DrawFn, file: Path) -> Mutation:
    """A mutation of the JSON file ``file`` (read now, to draw a key path of its values)."""
    kind = draw(st.sampled_from(
        ["set"] * 8 + ["delete"] * 3 + ["add"] * 2 + ["truncate"] * 2
        + ["text", "link", "missing", "fifo", "large"]
    ))  # fmt: skip
    if kind in ("set", "delete", "add"):
        paths = key_paths(json.loads(file.read_text()))
        path = draw(st.sampled_from(paths[1:] if kind == "delete" and len(paths) > 1 else paths))
        if kind == "set":
            return Mutation(kind, path, draw(VALUES))
        if kind == "add":
            key = draw(st.sampled_from(["extra", "", "model", "best", "__proto__", "x" * 1000]))
            return Mutation(kind, path, (key, draw(VALUES)))
        return Mutation(kind, path)
    if kind == "truncate":
        return Mutation(kind, value=draw(st.integers(0, 10_000)))
    if kind == "text":
        return Mutation(kind, value=draw(TEXTS))
    if kind == "link":
        return Mutation(kind, value=draw(LINKS))
    return Mutation(kind)
