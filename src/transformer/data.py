"""Parallel text in, (source, target) sentence pairs out: file readers and the data splits.

Two file formats:

- line-aligned files ``src`` and ``tgt`` (plain or .gz), line i of one translating line i of the
  other;
- a TSV of pairs in ``src`` alone, the Tatoeba/Anki format ``english<TAB>other[<TAB>attribution]``,
  as .tsv/.txt or still inside its .zip. For a user's TSV column 1 is the source and column 2 the
  target; for the named tatoeba corpora the direction follows src_lang/tgt_lang.

Every problem is a UserError naming the file and line. Pairs with an empty side are skipped and
counted. Sentences are stripped of surrounding whitespace; nothing else is changed (tokenization
and the max_len filter come later).
"""

from __future__ import annotations

import gzip
import hashlib
import zipfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from . import corpora
from .config import DataConfig
from .errors import UserError

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


def _split_key(pair: Pair, seed: int) -> bytes:
    """The pair's rank; its sides in sorted order, so that both directions split alike."""
    first, second = sorted(pair)
    return hashlib.blake2b(f"{seed}\n{first}\t{second}".encode(), digest_size=8).digest()


def split_pairs(
    pairs: list[Pair], valid_fraction: float, test_fraction: float, seed: int
) -> tuple[list[Pair], list[Pair], list[Pair]]:
    """Deals pairs into (train, valid, test), reproducibly and without leaks between splits.

    Each distinct pair is ranked by a BLAKE2 hash of (seed, pair): the same split on every run,
    machine and Python version, whatever the order of the file or the direction. The first
    ``round(valid_fraction · distinct)`` go to valid (at least one if the fraction is > 0), the
    next to test, the rest to train. All copies of a repeated pair land in the same split, so a
    pair is never both trained on and validated on. Each split keeps the order of the file.

    Args:
        pairs: all the pairs.
        valid_fraction: share of distinct pairs held out for validation.
        test_fraction: share held out for testing.
        seed: the split seed.
    """
    distinct = sorted(dict.fromkeys(pairs), key=lambda pair: _split_key(pair, seed))
    n_valid, n_test = (
        max(1, round(f * len(distinct))) if f > 0 else 0 for f in (valid_fraction, test_fraction)
    )
    if n_valid + n_test >= len(distinct):
        raise UserError(
            f"{len(distinct)} distinct pairs are too few to hold out valid_fraction="
            f"{valid_fraction} and test_fraction={test_fraction} and keep pairs for training"
        )
    split_of = {pair: 1 for pair in distinct[:n_valid]}
    split_of.update({pair: 2 for pair in distinct[n_valid : n_valid + n_test]})
    splits: tuple[list[Pair], list[Pair], list[Pair]] = ([], [], [])
    for pair in pairs:
        splits[split_of.get(pair, 0)].append(pair)
    return splits


@dataclass
class Splits:
    """The sentence pairs of one run, ready for tokenization.

    ``skipped_empty`` counts the pairs dropped for an empty side (all splits); ``source`` says
    where the pairs came from, for the training log.
    """

    train: list[Pair]
    valid: list[Pair]
    test: list[Pair]
    skipped_empty: int
    source: str
    test_groups: list[str] | None = None  # a class per test pair, to report results by class
    test_note: str = ""  # what the test split is, honestly (e.g. which classes were trained on)


def _read_user_pairs(src: str, tgt: str | None) -> list[Pair]:
    return read_parallel(src, tgt) if tgt is not None else read_tsv_pairs(src)


def _user_files(data: DataConfig) -> Splits:
    if data.src is None:
        raise UserError("no training data: set data.corpus, or data.src (and data.tgt)")
    if data.valid_tgt is not None and data.valid_src is None:
        raise UserError(f"data.valid_tgt ({data.valid_tgt}) is given without data.valid_src")
    train, skipped = drop_empty(_read_user_pairs(data.src, data.tgt))
    files = data.src if data.tgt is None else f"{data.src} + {data.tgt}"
    if not train:
        raise UserError(f"{files}: no sentence pairs")
    if data.valid_src is None:
        train, valid, test = split_pairs(
            train, data.valid_fraction, data.test_fraction, data.split_seed
        )
        return Splits(train, valid, test, skipped, f"{files} (split seed {data.split_seed})")
    valid, skipped_valid = drop_empty(_read_user_pairs(data.valid_src, data.valid_tgt))
    train, _, test = split_pairs(train, 0.0, data.test_fraction, data.split_seed)
    valid_files = (
        data.valid_src if data.valid_tgt is None else f"{data.valid_src} + {data.valid_tgt}"
    )
    return Splits(train, valid, test, skipped + skipped_valid, f"{files}, valid {valid_files}")


def load_splits(data: DataConfig) -> Splits:
    """Reads (or downloads, or generates) the train/valid/test pairs that ``data`` describes.

    Named corpora: ``numbers`` is generated; ``multi30k`` brings its own train/val/test_2016_flickr;
    ``tatoeba-*`` is one file, split with split_seed, valid_fraction and test_fraction. Files:
    ``src`` (+ ``tgt``), split the same way unless ``valid_src`` (+ ``valid_tgt``) is given.

    Args:
        data: the data section of the run config.
    """
    direction = f"{data.src_lang}->{data.tgt_lang}"
    if data.corpus is not None and data.src is not None:
        raise UserError(
            f"data.corpus is {data.corpus!r} but data.src ({data.src}) is given too: set "
            f"data.corpus to null to train on files"
        )
    if data.corpus is None:
        return _user_files(data)
    if data.corpus == "numbers":
        numbers = corpora.number_splits(data)
        train, valid, test = (
            corpora.number_pairs(data, split)
            for split in (numbers.train, numbers.valid, numbers.test)
        )
        source = f"numbers 0..{data.numbers_max} {direction} (generated, seed {data.split_seed})"
        groups = [corpora.magnitude(n) for n in numbers.test]
        return Splits(train, valid, test, 0, source, groups, corpora.numbers_test_note(data))
    if data.corpus == "multi30k":
        files = corpora.multi30k_files(data)
        splits, skipped = {}, 0
        for name, (src, tgt) in files.items():
            splits[name], dropped = drop_empty(read_parallel(src, tgt))
            skipped += dropped
        source = f"multi30k {direction} from {files['train'][0].parent}"
        return Splits(splits["train"], splits["valid"], splits["test"], skipped, source)
    path, english_is_source = corpora.tatoeba_file(data)
    pairs, skipped = drop_empty(read_tsv_pairs(path, first_is_source=english_is_source))
    train, valid, test = split_pairs(
        pairs, data.valid_fraction, data.test_fraction, data.split_seed
    )
    source = f"{data.corpus} {direction} from {path} (split seed {data.split_seed})"
    return Splits(train, valid, test, skipped, source)
