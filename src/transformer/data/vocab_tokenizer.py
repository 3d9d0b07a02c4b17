"""Marian's tokenizer: SentencePiece cuts the text into pieces, a vocabulary table numbers them.

Models trained with Marian (the OPUS-MT models on the Hugging Face Hub) segment text with one
SentencePiece model per side but number the pieces through their own vocabulary
(``vocab.json``), not through SentencePiece's ids; a piece the vocabulary lacks becomes
``<unk>``, as in Hugging Face's ``MarianTokenizer``. ``VocabTokenizer`` does the same with a
table in our id order: ``<pad>`` 0, ``<unk>`` 1, ``<s>`` 2, ``</s>`` 3 (vocab.py), then the
pieces; piece i has id i. How Marian's ids become these is the importer's business
(``hub/marian_vocab.py``).

Why renumber rather than carry Marian's ids (eos 0, pad = decoder start = the last id): PAD_ID,
BOS_ID and EOS_ID are fixed project-wide, in the masks, the searches, the loss and both
exports. Permuting the vocabulary rows once, on import, keeps all of them true; carrying a
second set of special ids would thread it through every one of them.

Models that translate into several languages (``opus-mt-en-ROMANCE``) read a ``>>fra<<`` token
before the source pieces; ``with_prefix`` gives the tokenizer that puts it there
(``Tokenizers.for_target_language``, DecodeConfig.target_language).

On disk, in ``<model_dir>/tokenizer/``: ``src.model`` and ``tgt.model`` (the SentencePiece
models, as they came) with ``src.pieces.json`` and ``tgt.pieces.json`` (the tables, JSON lists).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path

import sentencepiece as spm

from ..errors import UserError
from ..reading import read_bytes, read_json
from ..vocab import BOS_ID, EOS_ID, PAD_ID, UNK_ID

PIECES_SUFFIX = ".pieces.json"
SPECIALS = {PAD_ID: "<pad>", UNK_ID: "<unk>", BOS_ID: "<s>", EOS_ID: "</s>"}
WORD_START = "▁"  # SentencePiece's mark of a word's first piece (U+2581)


class VocabTokenizer:
    """SentencePiece pieces numbered by a table: text to ids and back.

    Args:
        model: the serialized SentencePiece model (its own ids are not used).
        table: the pieces in id order; ids 0-3 must be ``SPECIALS``.
        name: where they came from, for error messages.
        prefix: ids put before every encoded sentence (a target-language token).
    """

    def __init__(
        self, model: bytes, table: list[str], name: str = "vocabulary", prefix: Sequence[int] = ()
    ) -> None:
        try:
            self.processor = spm.SentencePieceProcessor(model_proto=model)
        except RuntimeError:
            raise UserError(f"{name}: not a SentencePiece model") from None
        found = {i: table[i] for i in SPECIALS if i < len(table)}
        if found != SPECIALS:
            raise UserError(f"{name}: the first ids must be {SPECIALS}, got {found}")
        self.ids: dict[str, int] = {}
        for i, piece in enumerate(table):
            if not isinstance(piece, str) or piece in self.ids:
                raise UserError(f"{name}: piece {piece!r} (id {i}) is not a new string")
            self.ids[piece] = i
        self.model, self.table, self.name, self.prefix = model, table, name, list(prefix)

    @classmethod
    def load(cls, path: str | Path) -> VocabTokenizer:
        """Reads ``NAME.model`` and its table ``NAME.pieces.json`` (``path`` is the former)."""
        model_path = Path(path)
        table_path = model_path.with_suffix(PIECES_SUFFIX)
        if not model_path.exists():
            raise UserError(f"file not found: {model_path}")
        return cls(read_bytes(model_path), read_json(table_path, list), str(table_path))

    @property
    def vocab_size(self) -> int:
        return len(self.table)

    @property
    def languages(self) -> list[str]:
        """The target languages of the ``>>xxx<<`` tokens in the table (``xxx``), if any."""
        return [p[2:-2] for p in self.table if len(p) > 4 and p[:2] == ">>" and p[-2:] == "<<"]

    def with_prefix(self, prefix: Sequence[int]) -> VocabTokenizer:
        """The same tokenizer, putting ``prefix`` before every sentence's ids."""
        return VocabTokenizer(self.model, self.table, self.name, prefix)

    def _number(self, pieces: list[str]) -> list[int]:
        return [*self.prefix, *(self.ids.get(piece, UNK_ID) for piece in pieces)]

    def encode(self, text: str) -> list[int]:
        """The prefix, then the ids of the pieces of ``text`` (without BOS or EOS)."""
        return self._number(self.processor.encode(text, out_type=str))

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        """``encode`` for many sentences at once (SentencePiece spreads them over threads)."""
        return [self._number(pieces) for pieces in self.processor.encode(texts, out_type=str)]

    def decode(self, ids: Iterable[int]) -> str:
        """Text of ids (plain ints); PAD, BOS, EOS are left out, UNK shows as " ⁇ ".

        SentencePiece joins the pieces; a piece it does not know itself (the table may hold
        pieces of the other side's model) stays as written, so its "▁" becomes a space here,
        as in Hugging Face's ``MarianTokenizer.convert_tokens_to_string``.
        """
        pieces = [self.table[i] for i in ids if i not in (PAD_ID, BOS_ID, EOS_ID)]
        return self.processor.decode_pieces(pieces).replace(WORD_START, " ").strip()

    def pieces(self, text: str) -> list[str]:
        """The pieces the model reads for ``text``: prefix first, "<unk>" for unknown ones."""
        return [self.table[i] for i in self.encode(text)]

    def id_to_piece(self, i: int) -> str:
        return self.table[i]

    def vocabulary(self) -> list[str]:
        """Every piece, in id order (piece i has id i)."""
        return list(self.table)

    def files(self) -> dict[str, bytes]:
        """What ``save`` writes, by file-name suffix: the model and its table."""
        table = json.dumps(self.table, ensure_ascii=False).encode()
        return {".model": self.model, PIECES_SUFFIX: table}
