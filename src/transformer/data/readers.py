"""Parallel text in, (source, target) sentence pairs out: the file readers.

Two file formats:

- line-aligned files ``src`` and ``tgt`` (plain or .gz), line i of one translating line i of the
  other;
- a TSV of pairs in ``src`` alone, the Tatoeba/Anki format ``english<TAB>other[<TAB>attribution]``,
  as .tsv/.txt or still inside its .zip. For a user's TSV column 1 is the source and column 2 the
  target; for the named tatoeba corpora the direction follows src_lang/tgt_lang.

Every problem (a line that is not UTF-8, holds a NUL byte or a carriage return not ending it, or
is longer than ``MAX_LINE_BYTES``) is a UserError naming the file and line; ``decoded_lines``
reads standard input the same way. Pairs with an empty side are dropped and counted
(``drop_empty``). Sentences are stripped of surrounding whitespace; nothing else is changed
(tokenization and the max_len filter come later).
"""

from __future__ import annotations

import gzip
import itertools
import zipfile
import zlib
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO

from ..errors import UserError

Pair = tuple[str, str]
MAX_LINE_BYTES = 2**20  # 1 MiB: a sentence or a paragraph a line is far shorter


def _check_file(path: Path) -> None:
    if not path.exists():
        broken = " (a symbolic link to a missing file, or in a loop)" if path.is_symlink() else ""
        raise UserError(f"file not found: {path}{broken}")
    if path.is_dir():
        raise UserError(f"not a file: {path} is a folder; give a file")
    if not path.is_file():  # some files are read twice (training's splits); a device never ends
        raise UserError(f"not a file: {path} is a pipe or a device, not a regular file; give a "
                        "file (text to translate may also come on standard input)")  # fmt: skip


def decoded_lines(stream: IO[bytes], name: str) -> Iterator[str]:
    """The lines of a byte stream (a file, standard input, a member of a zip), decoded strictly
    as UTF-8 one at a time, so that an error can name its 1-based line. Refused too: a NUL byte
    (text never holds one, binary data does, and can decode as UTF-8), a carriage return
    inside a line (lines end with \\n or \\r\\n), and a line longer than ``MAX_LINE_BYTES``,
    read no further than that: ``/dev/zero`` piped in was a MemoryError, and 300 MB on one line
    SentencePiece's ``bad_alloc``."""
    bounded = iter(lambda: stream.readline(MAX_LINE_BYTES + 2), b"")  # + "\r\n"
    for number, raw in enumerate(bounded, 1):
        if len(raw.rstrip(b"\r\n")) > MAX_LINE_BYTES:
            raise UserError(f"{name}: line {number} is longer than {MAX_LINE_BYTES:,} bytes: not "
                            "a line of text (a sentence, or a paragraph, a line)")  # fmt: skip
        if b"\0" in raw:
            raise UserError(f"{name}: line {number} holds a NUL byte: binary data, not text")
        try:
            line = raw.decode("utf-8").rstrip("\r\n")
        except UnicodeDecodeError as error:
            raise UserError(
                f"{name}: line {number} is not valid UTF-8 (byte {raw[error.start]:#04x} at "
                f"position {error.start + 1} of the line)"
            ) from None
        if "\r" in line:  # old Mac line endings, or damage: the lines after it would be lost
            raise UserError(f"{name}: line {number} holds a carriage return (\\r) inside the "
                            "line; lines end with \\n or \\r\\n (a file with old Mac line "
                            "endings? convert it: tr '\\r' '\\n')")  # fmt: skip
        if number == 1 and line.startswith("\ufeff"):  # a byte-order mark some editors write
            line = line[1:]
        yield line


def iter_lines(path: str | Path) -> Iterator[str]:
    """The lines of a UTF-8 text file, plain or gzip-compressed (by its .gz suffix), one at a
    time (a file of any size in constant memory).

    Only the line ending is removed; lines split on "\\n" alone, never on the other Unicode line
    breaks that ``str.splitlines`` knows, which would break the alignment of parallel files.

    Args:
        path: the file.
    """
    path = Path(path)
    _check_file(path)
    try:
        with gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb") as f:
            yield from decoded_lines(f, str(path))
    except (OSError, EOFError, zlib.error) as error:
        raise UserError(f"{path}: cannot read: {error}") from None


def read_lines(path: str | Path) -> list[str]:
    """All the lines of ``iter_lines(path)``."""
    return list(iter_lines(path))


def iter_parallel(src_path: str | Path, tgt_path: str | Path) -> Iterator[Pair]:
    """Pairs from two line-aligned files, read in step; their line counts must agree.

    Args:
        src_path: the source-language file.
        tgt_path: the target-language file.
    """
    end = object()
    src, tgt = iter_lines(src_path), iter_lines(tgt_path)
    for count, (s, t) in enumerate(itertools.zip_longest(src, tgt, fillvalue=end)):
        if s is end or t is end:  # one file ended: count the rest of the other for the message
            rest = 1 + sum(1 for _ in (tgt if s is end else src))
            n_src, n_tgt = (count, count + rest) if s is end else (count + rest, count)
            raise UserError(
                f"line counts differ: {src_path} has {n_src} lines, {tgt_path} has {n_tgt}"
            )
        yield s, t  # type: ignore[misc]


def read_parallel(src_path: str | Path, tgt_path: str | Path) -> list[Pair]:
    """All the pairs of ``iter_parallel``."""
    return list(iter_parallel(src_path, tgt_path))


def _zip_member(archive: zipfile.ZipFile, path: Path) -> str:
    """The one data file of an Anki zip: not a folder, not _about.txt, not a hidden file."""
    members = [
        name
        for name in archive.namelist()
        if not name.endswith("/") and not Path(name).name.startswith(("_", "."))
    ]
    if len(members) != 1:
        raise UserError(
            f"{path}: expected one data file in the zip besides _about.txt, got {members}"
        )
    return members[0]


def _tsv_lines(path: Path) -> Iterator[tuple[str, str]]:
    """(line, name for messages) of a TSV file or of the data member of a zip, one at a time."""
    if path.suffix != ".zip":
        for line in iter_lines(path):
            yield line, str(path)
        return
    _check_file(path)
    try:
        with zipfile.ZipFile(path) as archive:
            member = _zip_member(archive, path)
            name = f"{path}:{member}"
            with archive.open(member) as f:
                for line in decoded_lines(f, name):
                    yield line, name
    except (OSError, EOFError, zlib.error, zipfile.BadZipFile) as error:
        raise UserError(f"{path}: cannot read the zip: {error}") from None


def iter_tsv_pairs(
    path: str | Path, first_is_source: bool = True, target_key: str = "tgt"
) -> Iterator[Pair]:
    """Pairs from ``col1<TAB>col2[<TAB>more...]`` lines (.tsv, .txt, or a .zip holding one).

    Columns after the second (the Anki attribution) are ignored. A blank line counts as an
    empty pair; any other line without a tab is an error.

    Args:
        path: the file.
        first_is_source: True: (col1, col2); False: (col2, col1).
        target_key: the data key that would name a line-aligned target file instead (messages).
    """
    for number, (line, name) in enumerate(_tsv_lines(Path(path)), 1):
        columns = line.split("\t")
        if len(columns) < 2:
            if line.strip():
                raise UserError(
                    f"{name}: line {number} has no tab (expected source<TAB>target; for "
                    f"line-aligned files also give the target file: --{target_key} FILE, or "
                    f"data.{target_key} in a YAML config)"
                )
            columns = ["", ""]
        first, second = columns[0], columns[1]
        yield (first, second) if first_is_source else (second, first)


def read_tsv_pairs(path: str | Path, first_is_source: bool = True) -> list[Pair]:
    """All the pairs of ``iter_tsv_pairs``."""
    return list(iter_tsv_pairs(path, first_is_source))


def drop_empty(pairs: list[Pair]) -> tuple[list[Pair], int]:
    """Strips both sides and drops pairs with an empty side; returns (kept, number dropped)."""
    kept = list(nonempty(pairs))
    return kept, len(pairs) - len(kept)


def nonempty(pairs: Iterable[Pair]) -> Iterator[Pair]:
    """The pairs with both sides stripped, without those with an empty side."""
    for src, tgt in pairs:
        src, tgt = src.strip(), tgt.strip()
        if src and tgt:
            yield src, tgt
