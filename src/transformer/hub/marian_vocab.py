"""Marian's vocabulary and ours: which row of one is which row of the other.

    Marian (vocab.json)                          ours (vocab.py)
    </s>   eos_token_id, 0                       </s>   3  EOS_ID
    <unk>  1                                     <unk>  1  UNK_ID
    <pad>  pad_token_id = decoder_start_token_id <s>    2  BOS_ID, the decoder's first input
           (the last id)
    -                                            <pad>  0  PAD_ID, a new row
    every other piece, in id order               4, 5, ... in the same order

Marian starts decoding from its padding token: that row is the decoder's first input (all zeros
in the converted OPUS-MT models), so it becomes our ``<s>``. Our masks hide PAD_ID, so padding
needs an id of its own: the import adds one row, with a zero embedding and an output bias of
−inf. exp(−inf) = 0 keeps it out of the softmax, which therefore normalises over exactly
Marian's V entries, as Hugging Face's does: our log-probabilities equal theirs, and neither
search ever produces the row (ours bans PAD and BOS, theirs ``bad_words_ids = [[pad]]``).

Export maps back: our ``<pad>`` row is left out and ``<s>`` becomes the last id, named
``<pad>``. Marian numbers ``</s>``, ``<unk>`` and ``<pad>`` alike on both sides (one
``pad_token_id``, and ``MarianTokenizer`` looks the special tokens up in the source
vocabulary), so separate vocabularies of different sizes are made equal with unused entries
(``<unused-N>``: zero rows, output bias −inf) before the ``<pad>``.
"""

from __future__ import annotations

from pathlib import Path

from ..errors import UserError
from ..reading import read_json
from ..vocab import BOS_ID, EOS_ID, PAD_ID, UNK_ID

EOS, UNK, PAD = "</s>", "<unk>", "<pad>"  # Marian's special pieces (MarianTokenizer's defaults)
OURS = {PAD_ID: "<pad>", UNK_ID: "<unk>", BOS_ID: "<s>", EOS_ID: "</s>"}
UNUSED = "<unused-{}>"  # an entry that fills a shorter vocabulary on export

Rows = list[int | None]  # rows[i]: the other side's row for row i; None: a new row


def read_vocab(path: Path) -> list[str]:
    """The pieces of a Marian ``vocab.json`` ({piece: id}), in id order; the ids must be
    0..n-1, each once."""
    entries = read_json(path)
    if not all(isinstance(i, int) and not isinstance(i, bool) for i in entries.values()):
        raise UserError(f"{path}: expected a JSON object of piece: id")
    pieces: list[str | None] = [None] * len(entries)
    for piece, i in entries.items():
        if not 0 <= i < len(pieces) or pieces[i] is not None:
            raise UserError(f"{path}: the ids must be 0..{len(pieces) - 1}, each once; "
                            f"{piece!r} has id {i}")  # fmt: skip
        pieces[i] = piece
    return pieces  # type: ignore[return-value]  (every slot is filled: n distinct ids < n)


def specials(pieces: list[str], path: Path) -> tuple[int, int, int]:
    """The ids of ``</s>``, ``<unk>`` and ``<pad>`` in a Marian vocabulary."""
    ids = {piece: i for i, piece in enumerate(pieces)}
    missing = [p for p in (EOS, UNK, PAD) if p not in ids]
    if missing:
        raise UserError(f"{path} has no {', '.join(missing)} entry; a Marian vocabulary has "
                        f"{EOS}, {UNK} and {PAD}")  # fmt: skip
    return ids[EOS], ids[UNK], ids[PAD]


def ours_from_marian(pieces: list[str], path: Path) -> tuple[list[str], Rows]:
    """Our table (piece i = our id i) and, for each of our ids, its Marian id (None: our new
    padding row), from a Marian vocabulary in id order."""
    eos, unk, pad = specials(pieces, path)
    rows: Rows = [None, unk, pad, eos]
    table = [OURS[i] for i in range(len(rows))]
    for i, piece in enumerate(pieces):
        if i in (eos, unk, pad):
            continue
        if piece in OURS.values():
            raise UserError(f"{path}: the piece {piece!r} (id {i}) has the name of a special "
                            "token, which it is not; it cannot be imported")  # fmt: skip
        rows.append(i)
        table.append(piece)
    return table, rows


def marian_from_ours(table: list[str], size: int) -> tuple[list[str], Rows]:
    """A Marian vocabulary of ``size`` entries (at least ``len(table) - 1``; unused entries
    fill the rest) and, for each Marian id, our id (None: an unused entry)."""
    rows: Rows = [EOS_ID, UNK_ID, *range(len(OURS), len(table))]
    pieces = [EOS, UNK, *table[len(OURS) :]]
    fill = size - 1 - len(rows)
    rows += [None] * fill + [BOS_ID]
    pieces += [UNUSED.format(k) for k in range(fill)] + [PAD]
    return pieces, rows


def vocab_json(pieces: list[str]) -> dict[str, int]:
    """A ``vocab.json`` object: {piece: id}."""
    return {piece: i for i, piece in enumerate(pieces)}
