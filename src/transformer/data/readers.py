"""Parallel text in, (source, target) sentence pairs out: the file readers.

Two file formats:

- line-aligned files ``src`` and ``tgt`` (plain or .gz), line i of one translating line i of the
  other;
- a TSV of pairs in ``src`` alone, the Tatoeba/Anki format ``english<TAB>other[<TAB>attribution]``,
  as .tsv/.txt or still inside its .zip. For a user's TSV column 1 is the source and column 2 the
  target; for the named tatoeba corpora the direction follows src_lang/tgt_lang.

Every problem is a UserError naming the file and line. Pairs with an empty side are dropped and
counted (``drop_empty``). Sentences are stripped of surrounding whitespace; nothing else is
changed (tokenization and the max_len filter come later).
"""

from __future__ import annotations

import gzip
import zipfile
import zlib
from collections.abc import Iterator
from pathlib import Path

from ..errors import UserError

Pair = tuple[str, str]


def _check_file(path: Path) -> None:
    if not path.exists():
        raise UserError(f"file not found: {path}")
    if not path.is_file():
        raise UserError(f"not a file: {path}")


def _decoded(raw_lines: Iterator[bytes], name: str) -> list[str]:
    """Strict UTF-8 decoding line by line, so that an error can name its 1-based line."""
    lines = []
    for number, raw in enumerate(raw_lines, 1):
        try:
            lines.append(raw.decode("utf-8").rstrip("\r\n"))
        except UnicodeDecodeError as error:
            raise UserError(
                f"{name}: line {number} is not valid UTF-8 (byte {raw[error.start]:#04x} at "
                f"position {error.start + 1} of the line)"
            ) from None
    if lines and lines[0].startswith("\ufeff"):  # a byte-order mark some editors write
        lines[0] = lines[0][1:]
    return lines


def read_lines(path: str | Path) -> list[str]:
    """The lines of a UTF-8 text file, plain or gzip-compressed (by its .gz suffix).

    Only the line ending is removed; lines split on "\\n" alone, never on the other Unicode line
    breaks that ``str.splitlines`` knows, which would break the alignment of parallel files.

    Args:
        path: the file.
    """
    path = Path(path)
    _check_file(path)
    try:
        with gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb") as f:
            return _decoded(iter(f), str(path))
    except (OSError, EOFError, zlib.error) as error:
        raise UserError(f"{path}: cannot read: {error}") from None


def read_parallel(src_path: str | Path, tgt_path: str | Path) -> list[Pair]:
    """Pairs from two line-aligned files, which must have the same number of lines.

    Args:
        src_path: the source-language file.
        tgt_path: the target-language file.
    """
    src, tgt = read_lines(src_path), read_lines(tgt_path)
    if len(src) != len(tgt):
        raise UserError(
            f"line counts differ: {src_path} has {len(src)} lines, {tgt_path} has {len(tgt)}"
        )
    return list(zip(src, tgt, strict=True))


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


def _tsv_lines(path: Path) -> tuple[list[str], str]:
    """The lines of a TSV file or of the data member of a zip, and a name for messages."""
    if path.suffix != ".zip":
        return read_lines(path), str(path)
    _check_file(path)
    try:
        with zipfile.ZipFile(path) as archive:
            member = _zip_member(archive, path)
            name = f"{path}:{member}"
            with archive.open(member) as f:
                return _decoded(iter(f), name), name
    except (OSError, EOFError, zlib.error, zipfile.BadZipFile) as error:
        raise UserError(f"{path}: cannot read the zip: {error}") from None


def read_tsv_pairs(path: str | Path, first_is_source: bool = True) -> list[Pair]:
    """Pairs from ``col1<TAB>col2[<TAB>more...]`` lines (.tsv, .txt, or a .zip holding one).

    Columns after the second (the Anki attribution) are ignored. A blank line counts as an
    empty pair; any other line without a tab is an error.

    Args:
        path: the file.
        first_is_source: True: (col1, col2); False: (col2, col1).
    """
    lines, name = _tsv_lines(Path(path))
    pairs = []
    for number, line in enumerate(lines, 1):
        columns = line.split("\t")
        if len(columns) < 2:
            if line.strip():
                raise UserError(
                    f"{name}: line {number} has no tab (expected source<TAB>target; for "
                    f"line-aligned files also give the target file: --tgt FILE, or data.tgt "
                    f"in a YAML config)"
                )
            columns = ["", ""]
        first, second = columns[0], columns[1]
        pairs.append((first, second) if first_is_source else (second, first))
    return pairs


def drop_empty(pairs: list[Pair]) -> tuple[list[Pair], int]:
    """Strips both sides and drops pairs with an empty side; returns (kept, number dropped)."""
    stripped = [(src.strip(), tgt.strip()) for src, tgt in pairs]
    kept = [(src, tgt) for src, tgt in stripped if src and tgt]
    return kept, len(pairs) - len(kept)
