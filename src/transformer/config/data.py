"""Where the parallel text comes from and how it becomes token ids."""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import BadValue
from .checks import (
    check_finite,
    check_positive,
    check_probability,
    check_seeds,
    check_sizes,
    check_types,
)
from .model import SIZE_LIMITS

TOKENIZER_KINDS = ("bpe", "unigram")
MIN_VOCAB = 5  # SentencePiece's 4 special pieces (pad, unk, bos, eos) and one character
MIN_COVERAGE = 0.98  # SentencePiece refuses a character_coverage below this
NUMBERS_LIMIT = 10_000_000  # examples in a split of the numbers corpus: 100 times the default


@dataclass(frozen=True)
class DataConfig:
    """Where the parallel text comes from and how it becomes token ids.

    Either a named ``corpus`` or files: ``src``/``tgt`` line-aligned text (plain or .gz), or a
    TSV of pairs in ``src`` alone (``english<TAB>other[<TAB>attribution]``, also inside a .zip).
    """

    corpus: str | None = "numbers"
    """A named corpus (data/corpora.py), or None for files."""
    src_lang: str = "en"
    """Source language code (a named corpus uses it to pick its files)."""
    tgt_lang: str = "fr"
    """Target language code."""
    data_dir: str | None = None
    """Local folder holding a named corpus (else it is downloaded)."""
    src: str | None = None
    """Training source file, or a TSV/zip of pairs."""
    tgt: str | None = None
    """Training target file (omit for TSV)."""
    valid_src: str | None = None
    """Validation source file (else valid_fraction of the training pairs)."""
    valid_tgt: str | None = None
    """Validation target file, line-aligned with valid_src."""
    valid_fraction: float = 0.02
    """Held out with split_seed when no validation files are given."""
    test_fraction: float = 0.02
    """Likewise for a test split (multi30k and numbers bring their own)."""
    split_seed: int = 1234
    """Seed of the train / valid / test split; 0 to 4,294,967,295."""
    max_len: int = 128
    """Tokens per side; longer training pairs are filtered and counted."""
    tokenizer: str = "bpe"
    """SentencePiece model type: "bpe" or "unigram"."""
    vocab_size: int = 8000
    """Per vocabulary (joint: for both languages); 5 to 1,048,576."""
    tokenizer_sample: int = 1_000_000
    """Pairs SentencePiece trains on at most, drawn at random (split_seed) from the training
    pairs: memory stays bounded however large the corpus."""
    joint_vocab: bool = True
    """One SentencePiece model for both languages."""
    character_coverage: float = 1.0
    """Share of characters SentencePiece must cover, in [0.98, 1] (SentencePiece's range)."""
    verify_checksums: bool = True
    """Refuse a downloaded corpus file whose SHA-256 has changed."""
    numbers_max: int = 999_999
    """Numbers corpus: numbers are drawn from 0..numbers_max."""
    numbers_train: int = 100_000
    """Numbers corpus: training examples (drawn with replacement); at most 10,000,000."""
    numbers_valid: int = 1_000
    """Numbers corpus: size of the validation split; 1 to 10,000,000."""
    numbers_test: int = 1_000
    """Numbers corpus: size of the test split; 0 to 10,000,000."""

    def __post_init__(self) -> None:
        check_types(self)
        check_finite(self)
        if self.tokenizer not in TOKENIZER_KINDS:
            raise BadValue(
                f"DataConfig.tokenizer must be one of {TOKENIZER_KINDS}, got {self.tokenizer!r}"
            )
        check_positive(self, "max_len", "vocab_size", "tokenizer_sample", "numbers_max")
        check_sizes(self, {"vocab_size": SIZE_LIMITS["src_vocab_size"]})  # what a model holds
        check_sizes(self, {"numbers_train": NUMBERS_LIMIT, "numbers_valid": NUMBERS_LIMIT})
        if not 0 <= self.numbers_test <= NUMBERS_LIMIT:
            raise BadValue(f"DataConfig.numbers_test must be from 0 to {NUMBERS_LIMIT:,}, got "
                           f"{self.numbers_test!r}")  # fmt: skip
        check_seeds(self, "split_seed")
        check_probability(self, "valid_fraction", "test_fraction")
        if self.vocab_size < MIN_VOCAB:
            raise BadValue(f"DataConfig.vocab_size must be at least {MIN_VOCAB} (the 4 special "
                           f"pieces and one character), got {self.vocab_size!r}")  # fmt: skip
        if not MIN_COVERAGE <= self.character_coverage <= 1.0:
            raise BadValue(f"DataConfig.character_coverage must be in [{MIN_COVERAGE}, 1] "
                           f"(SentencePiece's range), got {self.character_coverage!r}")  # fmt: skip
