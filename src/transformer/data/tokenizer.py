"""SentencePiece subword tokenizers (Kudo & Richardson 2018), trained on the training pairs only.

The paper uses byte-pair encoding (§5.1: a shared source-target vocabulary of about 37000 tokens
for EN-DE); SentencePiece offers BPE and the unigram language model, on raw text with no
pre-tokenization. One model for both languages (``joint_vocab``) or one per side.

Special ids are fixed project-wide (config.py): pad 0 ``<pad>``, unk 1 ``<unk>``, bos 2 ``<s>``,
eos 3 ``</s>``. ``encode`` adds neither BOS nor EOS: where they go is the model's business.
The models live in ``<model_dir>/tokenizer/``: ``joint.model``, or ``src.model`` and
``tgt.model``. An imported Marian model's tokenizers are ``VocabTokenizer``s
(vocab_tokenizer.py): the same SentencePiece files, each with a table of its pieces beside it
(``src.pieces.json``, ``tgt.pieces.json``); ``Tokenizers`` loads and saves either kind.
"""

from __future__ import annotations

import hashlib
import io
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import sentencepiece as spm

from ..config import DataConfig
from ..errors import UserError
from ..files import remove_tree, write_bytes
from ..model_dir.layout import TOKENIZER
from ..reading import read_bytes
from ..vocab import BOS_ID, EOS_ID, PAD_ID, UNK_ID
from .vocab_tokenizer import PIECES_SUFFIX, VocabTokenizer

JOINT_MODEL, SRC_MODEL, TGT_MODEL = "joint.model", "src.model", "tgt.model"
SPECIAL_PIECES = {PAD_ID: "<pad>", UNK_ID: "<unk>", BOS_ID: "<s>", EOS_ID: "</s>"}

# SentencePiece's result depends on its thread count, so the count is fixed rather than taken
# from the machine: the same sentences give the same model everywhere.
TRAIN_THREADS = 4


class Tokenizer:
    """One SentencePiece model: text to ids and back.

    Args:
        model: the serialized SentencePiece model (the bytes of a ``.model`` file).
        name: where the model came from, for error messages.
    """

    def __init__(self, model: bytes, name: str = "SentencePiece model") -> None:
        if not model:  # SentencePiece takes no bytes as no model, and logs to stderr when asked
            raise UserError(f"{name}: empty, not a SentencePiece model")
        try:
            self.processor = spm.SentencePieceProcessor(model_proto=model)
        except RuntimeError:
            raise UserError(f"{name}: not a SentencePiece model") from None
        size = self.processor.get_piece_size()
        found = {i: self.processor.id_to_piece(i) for i in SPECIAL_PIECES if i < size}
        if found != SPECIAL_PIECES:
            raise UserError(f"{name}: special ids must be {SPECIAL_PIECES}, got {found}")
        self.model, self.name = model, name

    @classmethod
    def load(cls, path: str | Path) -> Tokenizer:
        """Reads a ``.model`` file."""
        if not Path(path).exists():
            raise UserError(f"file not found: {path}")
        return cls(read_bytes(path), str(path))

    @property
    def vocab_size(self) -> int:
        return self.processor.get_piece_size()

    def encode(self, text: str) -> list[int]:
        """Piece ids of ``text``, without BOS or EOS."""
        return self.processor.encode(text)

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        """``encode`` for many sentences at once (SentencePiece spreads them over threads)."""
        return self.processor.encode(texts)

    def decode(self, ids: Iterable[int]) -> str:
        """Text of piece ids (plain ints: ``tensor.tolist()``); PAD, BOS, EOS are left out, UNK
        shows as " ⁇ "."""
        return self.processor.decode([i for i in ids if i not in (PAD_ID, BOS_ID, EOS_ID)])

    def pieces(self, text: str) -> list[str]:
        """The subword pieces of ``text``, "▁" marking the start of a word."""
        return self.processor.encode(text, out_type=str)

    def id_to_piece(self, i: int) -> str:
        return self.processor.id_to_piece(i)

    def vocabulary(self) -> list[str]:
        """Every piece, in id order (piece i has id i)."""
        return [self.processor.id_to_piece(i) for i in range(self.vocab_size)]

    languages: tuple[str, ...] = ()  # no target-language tokens (see VocabTokenizer)

    def files(self) -> dict[str, bytes]:
        """What ``Tokenizers.save`` writes, by file-name suffix: the model."""
        return {".model": self.model}


def train_sentencepiece(sentences: list[str], data: DataConfig) -> Tokenizer:
    """Trains one SentencePiece model on in-memory sentences.

    Deterministic: all sentences are used (no sampling) with a fixed thread count. A
    ``vocab_size`` larger than the text supports gives a smaller vocabulary, not an error
    (``hard_vocab_limit=False``): read the real size from ``Tokenizer.vocab_size``.

    Args:
        sentences: the training text, one sentence per item.
        data: tokenizer (bpe | unigram), vocab_size and character_coverage are used.
    """
    model = io.BytesIO()
    try:
        spm.SentencePieceTrainer.train(
            sentence_iterator=iter(sentences),
            model_writer=model,
            model_type=data.tokenizer,
            vocab_size=data.vocab_size,
            character_coverage=data.character_coverage,
            hard_vocab_limit=False,
            input_sentence_size=0,
            num_threads=TRAIN_THREADS,
            pad_id=PAD_ID,
            unk_id=UNK_ID,
            bos_id=BOS_ID,
            eos_id=EOS_ID,
            pad_piece=SPECIAL_PIECES[PAD_ID],
            unk_piece=SPECIAL_PIECES[UNK_ID],
            bos_piece=SPECIAL_PIECES[BOS_ID],
            eos_piece=SPECIAL_PIECES[EOS_ID],
            minloglevel=2,  # errors only: SentencePiece logs every training step otherwise
        )
    except RuntimeError as error:
        raise UserError(_why_not(str(error), data, len(sentences))) from None
    return Tokenizer(model.getvalue())


def _why_not(error: str, data: DataConfig, n_sentences: int) -> str:
    """SentencePiece's refusal in this project's words (its own names the C++ condition and
    its command-line flags)."""
    what = (f"SentencePiece could not train a {data.tokenizer} vocabulary of "
            f"vocab_size={data.vocab_size} on {n_sentences:,} sentences")  # fmt: skip
    too_small = re.search(r"required_chars\. (\d+) vs (\d+)", error)
    if too_small:
        needed = int(too_small.group(2))
        return (f"{what}: the text's characters and the 4 special pieces need {needed:,} pieces "
                f"(character_coverage={data.character_coverage}); raise data.vocab_size to at "
                f"least {needed:,}, or lower data.character_coverage (down to 0.98)")  # fmt: skip
    condition, _, message = error.partition("] ")
    return f"{what}: {message.strip() or condition.rsplit('[', 1)[-1]}"


AnyTokenizer = Tokenizer | VocabTokenizer


@dataclass
class Tokenizers:
    """The source and target tokenizers of a model; with a joint vocabulary they are one object."""

    src: AnyTokenizer
    tgt: AnyTokenizer

    @property
    def joint(self) -> bool:
        return self.src is self.tgt

    def fingerprint(self) -> str:
        """SHA-256 of the tokenizers' files: what token ids made with them depend on."""
        digest = hashlib.sha256()
        for side in (self.src,) if self.joint else (self.src, self.tgt):
            for data in side.files().values():
                digest.update(data)
        return digest.hexdigest()

    def for_target_language(self, language: str) -> Tokenizers:
        """These tokenizers with the source reading ``>>language<<`` first (Marian models with
        several target languages); ``language`` "" leaves them as they are.

        A model with such tokens needs one, and a model without them takes none: either mistake
        is a UserError that lists what the model has, before any work.
        """
        known = self.src.languages
        if not known and not language:
            return self
        if not known:
            raise UserError(f"--target_language {language}: this model has no target-language "
                            "tokens (>>xxx<<); leave the option out")  # fmt: skip
        shown = ", ".join(known[:12]) + (f", ... ({len(known)} in all)" if len(known) > 12 else "")
        if not language:
            raise UserError(f"this model translates into several languages; choose one with "
                            f"--target_language: {shown}")  # fmt: skip
        if language not in known:
            raise UserError(f"--target_language {language}: this model has no >>{language}<< "
                            f"token; it has {shown}")  # fmt: skip
        assert isinstance(self.src, VocabTokenizer)  # only they have languages
        prefix = [self.src.ids[f">>{language}<<"]]
        return Tokenizers(self.src.with_prefix(prefix), self.tgt)

    @classmethod
    def train(cls, pairs: list[tuple[str, str]], data: DataConfig) -> Tokenizers:
        """Trains on the (source, target) training pairs (in memory; ``save`` writes them).

        Args:
            pairs: the training pairs only (never validation or test).
            data: tokenizer, vocab_size, joint_vocab and character_coverage are used.
        """
        if not pairs:
            raise UserError("no training pairs to train the tokenizer on")
        sources = [src for src, _ in pairs]
        targets = [tgt for _, tgt in pairs]
        if data.joint_vocab:
            joint = train_sentencepiece(sources + targets, data)
            tokenizers = cls(joint, joint)
        else:
            tokenizers = cls(train_sentencepiece(sources, data), train_sentencepiece(targets, data))
        return tokenizers

    def save(self, model_dir: Path) -> None:
        """Writes ``joint.model``, or ``src.model`` + ``tgt.model`` (each with its
        ``.pieces.json`` for VocabTokenizers), atomically, removing any other layout's files."""
        folder = Path(model_dir) / TOKENIZER
        folder.mkdir(parents=True, exist_ok=True)
        sides = {"joint": self.src} if self.joint else {"src": self.src, "tgt": self.tgt}
        written = set()
        for stem, tokenizer in sides.items():
            for suffix, data in tokenizer.files().items():
                write_bytes(folder / f"{stem}{suffix}", data, owner=folder)  # never half a file
                written.add(f"{stem}{suffix}")
        known = {
            JOINT_MODEL,
            SRC_MODEL,
            TGT_MODEL,
            *(f"{s}{PIECES_SUFFIX}" for s in ("src", "tgt")),
        }
        for name in known - written:
            remove_tree(folder / name, owner=folder)

    @classmethod
    def load(
        cls, model_dir: str | Path, sizes: tuple[int, int], origin: str = "the model's config"
    ) -> Tokenizers:
        """Loads what ``save`` wrote, for a model whose vocabularies have ``sizes`` (source,
        target) ids: each tokenizer must have exactly as many pieces as its side's embedding
        rows. Another model's tokenizer (a file copied over, the two sides swapped) would make
        ids past the embedding table, or read the model's ids as other words.

        Args:
            model_dir: the model's folder (the one holding ``tokenizer/``).
            origin: the file that gave ``sizes``, which a message names too.
        """
        folder = Path(model_dir) / TOKENIZER
        if (folder / JOINT_MODEL).is_file():
            joint = Tokenizer.load(folder / JOINT_MODEL)
            found = cls(joint, joint)
        elif (folder / SRC_MODEL).is_file() and (folder / TGT_MODEL).is_file():
            kind = VocabTokenizer if (folder / f"src{PIECES_SUFFIX}").is_file() else Tokenizer
            found = cls(kind.load(folder / SRC_MODEL), kind.load(folder / TGT_MODEL))  # Marian's
        else:
            raise UserError(f"no tokenizer in {folder}: expected {JOINT_MODEL}, or {SRC_MODEL} "
                            f"and {TGT_MODEL}")  # fmt: skip
        for side, tokenizer, size in (("src", found.src, sizes[0]), ("tgt", found.tgt, sizes[1])):
            if tokenizer.vocab_size != size:
                raise UserError(f"{tokenizer.name} has {tokenizer.vocab_size:,} pieces but "
                                f"{origin} gives {side}_vocab_size {size:,}: it is not the "
                                f"tokenizer the model was trained with, or {origin} is "
                                "damaged")  # fmt: skip
        return found
