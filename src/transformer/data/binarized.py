"""Token ids on disk: a binarized dataset, read through memory maps.

A split of examples is five files in one folder: for each side (``src``, ``tgt``), ``SIDE.bin``
holds every sentence's ids one after the other and ``SIDE.idx`` the int64 offsets (n + 1 of
them: sentence i is ``bin[idx[i]:idx[i+1]]``); ``meta.json`` says how many, in which dtype,
and what they were made from. ``binarize`` writes them once, streaming the corpus in chunks
through SentencePiece's batched encoder; ``TokenDataset.open`` maps them back with
``np.memmap``. A training run then holds 16 bytes of offsets per pair and the pages the OS
keeps, instead of Python lists of every example (fairseq's indexed datasets do the same).

The source side is stored as the encoder reads it (pieces + EOS); the target without BOS or
EOS (``batching.collate`` adds them).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import numpy as np
import torch

from ..errors import UserError
from ..files import atomic_write, write_bytes, write_json_atomic
from ..reading import read_json
from ..vocab import BOS_ID, EOS_ID, PAD_ID
from .batching import Batch, Example, encode_source
from .readers import Pair
from .tokenizer import Tokenizers

SIDES = ("src", "tgt")


ID_DTYPES = (np.dtype(np.uint16), np.dtype(np.uint32))  # what ``id_dtype`` chooses from


def id_dtype(vocab_size: int) -> np.dtype:
    """The smallest unsigned dtype that holds every id: 2 bytes up to 65,536 pieces."""
    return ID_DTYPES[0] if vocab_size <= 1 << 16 else ID_DTYPES[1]


class TokenDataset(Sequence[Example]):
    """Examples as two flat id arrays with offsets (memory-mapped when opened from disk)."""

    def __init__(self, src: np.ndarray, src_idx: np.ndarray, tgt: np.ndarray, tgt_idx: np.ndarray):
        self.ids = {"src": src, "tgt": tgt}
        self.idx = {"src": src_idx, "tgt": tgt_idx}

    def __len__(self) -> int:
        return len(self.idx["src"]) - 1

    def __getitem__(self, i: int) -> Example:  # type: ignore[override]
        src, tgt = (self.ids[s][self.idx[s][i] : self.idx[s][i + 1]].tolist() for s in SIDES)
        return Example(src, tgt)

    def batch(self, indices: np.ndarray) -> Batch:
        """The examples at ``indices`` padded into a training batch, straight from the flat
        arrays (what ``collate([self[i] for i in indices])`` gives, without Python lists)."""
        rows = np.asarray(indices, dtype=np.int64)
        src = _padded(self.ids["src"], self.idx["src"], rows)  # (B, S)
        tgt_in = _padded(self.ids["tgt"], self.idx["tgt"], rows, before=BOS_ID)  # (B, T)
        tgt_out = _padded(self.ids["tgt"], self.idx["tgt"], rows, after=EOS_ID)  # (B, T)
        return Batch(*(torch.from_numpy(a) for a in (src, tgt_in, tgt_out)))

    def lengths(self, side: str) -> np.ndarray:
        """Tokens per sentence of one side, (n,)."""
        return np.diff(self.idx[side])

    @classmethod
    def from_examples(cls, examples: Sequence[Example]) -> TokenDataset:
        """An in-memory dataset (validation sets, tests)."""
        arrays = []
        for side in SIDES:
            rows = [getattr(e, side) for e in examples]
            idx = np.zeros(len(rows) + 1, dtype=np.int64)
            np.cumsum([len(r) for r in rows], out=idx[1:])
            arrays += [np.fromiter((i for r in rows for i in r), np.int64, idx[-1]), idx]
        return cls(*arrays)

    @classmethod
    def open(cls, folder: Path, vocab_sizes: tuple[int, int] | None = None) -> TokenDataset:
        """Maps a binarized split back; files that do not fit together are an error naming them.

        Args:
            vocab_sizes: the (source, target) vocabulary sizes the ids must be below, checked
                with one pass over each side's ids (an embedding lookup fails on a larger one).
        """
        meta_path = folder / "meta.json"
        meta = read_json(meta_path)
        try:
            dtype, n = np.dtype(meta["dtype"]), int(meta["examples"])
        except (ValueError, KeyError, TypeError) as error:
            raise UserError(f"{meta_path} is damaged ({error})") from None
        if dtype not in ID_DTYPES:  # ids read as any other type would be other numbers
            written = ", ".join(d.name for d in ID_DTYPES)
            raise UserError(f"{meta_path} is damaged: dtype {meta['dtype']!r} is not one "
                            f"binarize writes ({written})")  # fmt: skip
        arrays = []
        for i, side in enumerate(SIDES):
            idx_path, bin_path = folder / f"{side}.idx", folder / f"{side}.bin"
            _check_size(idx_path, (n + 1) * 8)
            idx = np.fromfile(idx_path, dtype=np.int64)
            if idx[0] != 0 or np.any(np.diff(idx) < 0):
                raise UserError(f"{idx_path} is damaged: its offsets do not increase from 0")
            _check_size(bin_path, int(idx[-1]) * dtype.itemsize)
            ids = np.memmap(bin_path, dtype=dtype, mode="r") if idx[-1] else np.zeros(0, dtype)
            if vocab_sizes is not None and (largest := int(ids.max(initial=0))) >= vocab_sizes[i]:
                raise UserError(f"{bin_path} is damaged: it holds id {largest:,}, but the "
                                f"{side} vocabulary has {vocab_sizes[i]:,} pieces")  # fmt: skip
            arrays += [ids, idx]
        return cls(*arrays)


def _padded(
    ids: np.ndarray, idx: np.ndarray, rows: np.ndarray, before: int | None = None,
    after: int | None = None,
) -> np.ndarray:  # fmt: skip
    """Rows ``rows`` of a flat id array, right-padded with PAD_ID, (B, L); ``before`` / ``after``
    add one id in front of / behind every row."""
    starts, lengths = idx[rows], idx[rows + 1] - idx[rows]  # (B,), (B,)
    shift, extra = int(before is not None), int(before is not None or after is not None)
    out = np.full((len(rows), max(1, int(lengths.max(initial=0)) + extra)), PAD_ID, np.int64)
    row = np.repeat(np.arange(len(rows)), lengths)  # (N,) the row of every id
    column = np.arange(len(row)) - np.repeat(np.cumsum(lengths) - lengths, lengths)  # (N,)
    out[row, column + shift] = ids[np.repeat(starts, lengths) + column]
    if before is not None:
        out[:, 0] = before
    if after is not None:
        out[np.arange(len(rows)), lengths] = after
    return out


def _check_size(path: Path, expected: int) -> None:
    try:
        size = path.stat().st_size
    except OSError:
        raise UserError(f"{path} is missing") from None
    if size != expected:
        raise UserError(
            f"{path} is damaged or truncated: {size:,} bytes where its index says {expected:,}"
        )


@dataclass
class Binarized:
    """What ``binarize`` wrote: the dataset, and how many pairs were too long."""

    dataset: TokenDataset
    kept: int
    too_long: int


class _Writer:
    """Appends sentences of one side to SIDE.bin (a file of the write gate, which appears
    whole when the block that opened it ends); ``offsets`` is SIDE.idx's content."""

    def __init__(self, file: BinaryIO, dtype: np.dtype) -> None:
        self.file, self.dtype, self.lengths = file, dtype, [0]

    def add(self, rows: list[list[int]]) -> None:
        flat = np.fromiter((i for row in rows for i in row), self.dtype)
        self.file.write(flat.tobytes())
        self.lengths += [len(row) for row in rows]

    def offsets(self) -> bytes:
        return np.cumsum(np.array(self.lengths, dtype=np.int64)).tobytes()


def binarize(
    pairs: Iterable[Pair],
    tokenizers: Tokenizers,
    max_len: int,
    folder: Path,
    provenance: dict,
    chunk: int = 50_000,
) -> Binarized:
    """Encodes ``pairs`` chunk by chunk into ``folder`` and maps the result back.

    Pairs longer than ``max_len`` tokens on either side (source counting its EOS, target its
    BOS) are left out and counted. ``provenance`` (what the ids were made from) goes into
    meta.json, so that a reused dataset can be checked against the run that wants it.
    """
    folder.mkdir(parents=True, exist_ok=True)
    dtype = id_dtype(max(tokenizers.src.vocab_size, tokenizers.tgt.vocab_size))
    kept = too_long = 0
    with ExitStack() as files:
        writers = {side: _Writer(files.enter_context(atomic_write(folder / f"{side}.bin", "wb",
                                                                  owner=folder)), dtype)
                   for side in SIDES}  # fmt: skip
        for part in _chunks(pairs, chunk):
            sources = tokenizers.src.encode_batch([src for src, _ in part])
            targets = tokenizers.tgt.encode_batch([tgt for _, tgt in part])
            rows: dict[str, list[list[int]]] = {"src": [], "tgt": []}
            for src_ids, tgt_ids in zip(sources, targets, strict=True):
                example = Example(encode_source(src_ids), tgt_ids)
                if max(example.cost) > max_len:
                    too_long += 1
                    continue
                rows["src"].append(example.src)
                rows["tgt"].append(example.tgt)
            kept += len(rows["src"])
            for side in SIDES:
                writers[side].add(rows[side])
    for side in SIDES:
        write_bytes(folder / f"{side}.idx", writers[side].offsets(), owner=folder)
    skipped = getattr(pairs, "skipped", 0)  # a PairStream counts the empty pairs it dropped
    meta = {"examples": kept, "dtype": dtype.name, "too_long": too_long,
            "skipped_empty": skipped, **provenance}  # fmt: skip
    write_json_atomic(folder / "meta.json", meta, owner=folder)
    return Binarized(TokenDataset.open(folder), kept, too_long)


def _chunks(items: Iterable[Pair], size: int) -> Iterator[list[Pair]]:
    part: list[Pair] = []
    for item in items:
        part.append(item)
        if len(part) == size:
            yield part
            part = []
    if part:
        yield part


def read_meta(folder: Path) -> dict | None:
    """The meta.json of a binarized split, or None when there is none to read."""
    try:
        return read_json(folder / "meta.json")
    except UserError:
        return None
