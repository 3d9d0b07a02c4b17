"""From text to batches: file readers, named corpora (downloaded or generated), the splits,
SentencePiece tokenizers (ours, and Marian's vocabulary-numbered ones), and token batching with
padding."""

from .batching import Batch, Example, collate, encode_source, length_batches, make_batches, pad
from .corpora import CORPORA, load_splits
from .readers import drop_empty, read_lines, read_parallel, read_tsv_pairs
from .splits import Splits, split_pairs
from .tokenizer import Tokenizer, Tokenizers
from .vocab_tokenizer import VocabTokenizer

__all__ = [
    "CORPORA", "Batch", "Example", "Splits", "Tokenizer", "Tokenizers", "collate", "drop_empty",
    "encode_source", "length_batches", "load_splits", "make_batches", "pad", "read_lines",
    "read_parallel", "read_tsv_pairs", "split_pairs", "VocabTokenizer",
]  # fmt: skip
