"""How translations are searched for: greedy, beam search or sampling, and their limits.

Every number has a documented range (``ranged``), checked here for every surface alike: the
command line, YAML, Python and the HTTP API (whose request schema takes its bounds from these
declarations, ``serve/schema.py``). Within the ranges the searches' arithmetic stays finite
(``tests/test_decode_ranges.py`` runs each search at the bounds).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ..errors import BadValue
from .checks import MAX_SEED, check_finite, check_ranges, check_types, range_of, ranged
from .model import ModelConfig

# No output is longer than the model's positions; no model has more than this many.
LONGEST = 65_536
# How word alignments are found (inference/alignment.py).
ALIGNMENT_METHODS = ("auto", "attention", "masking")
# One row's decoding step (ModelConfig.step_products) of the Multi30k model, d_model 256, 3
# decoder layers, 8,000 words: 4,800,512 multiply-adds. Batches of 64 sentences there for beam
# search, of 128 for a search of one row per sentence (docs/speed.md).
REFERENCE_STEP = ModelConfig.preset("small", tgt_vocab_size=8000).step_products()


@dataclass(frozen=True)
class DecodeConfig:
    """How translations are searched for (§6.1: beam 4, α = 0.6, max length input + 50)."""

    beam_size: int = ranged(4, 1, 1024)
    """1 = greedy search; in [1, 1024] (a wider beam keeps beam × vocabulary scores per
    sentence and rarely finds better translations)."""
    length_penalty: float = ranged(0.6, 0, 10)
    """GNMT α: score = log P / ((5 + |y|) / 6)^α; 0: none; in [0, 10]."""
    max_len_a: float = ranged(1.0, 0, 1000)
    """Output at most a · source length + b tokens; a in [0, 1000]."""
    max_len_b: int = ranged(50, 0, LONGEST)
    """Output length limit: a · source length + b tokens; b in [0, 65536]. The limit is raised
    to min_len and a prefix's length, and capped at the model's positions."""
    nbest: int = ranged(1, 1, 1024)
    """Hypotheses returned per sentence (<= beam_size, or samples drawn); in [1, 1024]."""
    sampling: bool = False
    """Sample instead of searching."""
    temperature: float = ranged(1.0, 0.01, 100)
    """Sampling temperature: < 1 sharper, > 1 flatter; in [0.01, 100] (at 0.01 a log-prob gap
    of 0.1 becomes a factor e^10: greedy in all but name; at 100, near uniform)."""
    top_k: int = ranged(0, 0, 1_000_000)
    """Sample from the k most likely tokens; 0: all; in [0, 1000000]."""
    top_p: float = ranged(1.0, 0, 1, open_low=True)
    """Sample from the fewest most likely tokens whose probability reaches p (nucleus); 1: all;
    in (0, 1] (the most likely token is always kept)."""
    sampling_seed: int = ranged(-1, -1, MAX_SEED)
    """Sampling's random seed: each sentence's samples then depend only on the seed, the
    sentence, its prefix and the other options, never on the batch, the threads or the other
    sentences, so that the same input gives the same samples; -1: new samples each time; in
    [-1, 4294967295]."""
    min_len: int = ranged(0, 0, LONGEST)
    """No EOS before this many output tokens (a prefix counts); 0: none; in [0, 65536]."""
    no_repeat_ngram: int = ranged(0, 0, LONGEST)
    """No n-gram of target pieces twice in one output; 0: off; in [0, 65536]."""
    repetition_penalty: float = ranged(1.0, 0.01, 100)
    """Tokens already in the output have their logit divided by this (multiplied if negative,
    CTRL), in [0.01, 100]; > 1 discourages repeats; 1: off."""
    alignment: bool = False
    """Also give word alignments (Pharaoh i-j, source-target, 0-based)."""
    alignment_method: str = "auto"
    """How alignments are found: attention (the last layer's encoder-decoder attention, kept
    by the search as it goes), masking (each source word masked in turn, the drop in each
    target word's log-probability: one more pass per source word; torch engine only) or auto
    (masking to put tags back with the torch engine, attention otherwise)."""
    batch_size: int = ranged(0, 0, LONGEST)
    """Sentences per batch; 0: as suits the model and the search, 64, or up to 256 for a
    Transformer whose decoding steps cost less than a d_model 256 one's with 3 layers and 8,000
    words (128 for that one with greedy search); in [0, 65536]."""
    max_source_tokens: int = ranged(8192, 1, 1 << 24)
    """Source tokens per batch, padding included; in [1, 16777216]."""
    target_language: str = ""
    """For a model with several target languages (Marian's >>xxx<< tokens): the one to
    translate into, e.g. fra; its token goes before every source sentence."""

    def __post_init__(self) -> None:
        check_types(self)
        check_finite(self)
        check_ranges(self)
        if self.alignment_method not in ALIGNMENT_METHODS:
            choices = ", ".join(ALIGNMENT_METHODS)
            raise BadValue(f"DecodeConfig.alignment_method must be one of {choices}, "
                           f"got {self.alignment_method!r}")  # fmt: skip
        if self.nbest > self.beam_size and not self.sampling:
            raise BadValue(
                f"DecodeConfig.nbest ({self.nbest}) cannot exceed beam_size ({self.beam_size})"
            )
        if self.max_len_a == 0 and self.min_len > self.max_len_b:
            raise BadValue(
                f"DecodeConfig.min_len ({self.min_len}) is above the length limit max_len_b "
                f"({self.max_len_b})"
            )

    def sentences_per_batch(self, model: ModelConfig, search: bool = True) -> int:
        """``batch_size``, or with 0 what suits ``model`` and the search: for a Transformer,
        64 sentences times as many as its decoding step costs a row less than the Multi30k
        model's (``REFERENCE_STEP``), and twice that for a search of one row per sentence
        (greedy search, one sample), at least 64 and at most 256; for an RNN, 64. ``search``
        False: for teacher-forced batches (``score``, alignments by masking), which hold every
        position's logits at once and have no steps: never twice.

        A decoder step has a fixed cost (the Python and the operator calls around its matrix
        products) and products that cost in proportion to the rows. A small model's step is
        mostly that fixed cost at 64 rows, so more sentences share each step: the demo's model
        (d_model 128, 227 words) translates 3,000 numbers 1.3x faster greedy and 1.1-1.2x beam
        4 in batches of 256 than of 64. A beam search's step has K rows a sentence; greedy
        search's one, so it gains from more: the Multi30k model translates test2016 greedy
        1.1-1.45x faster in batches of 128 than of 64 on 2 threads, where beam 4 gains at most
        1.09x for 200-250 MB more memory and keeps 64 (docs/speed.md). A wide
        vocabulary makes a step costly, and its logits big: such a model keeps 64."""
        if self.batch_size:
            return self.batch_size
        if model.architecture != "transformer":
            return 64
        per_row = 2 if search and self.rows == 1 else 1
        return min(256, max(64, round(64 * per_row * REFERENCE_STEP / model.step_products())))

    def sized_for(self, model: ModelConfig, search: bool = True) -> DecodeConfig:
        """This config with ``batch_size`` set to ``sentences_per_batch(model, search)``."""
        size = self.sentences_per_batch(model, search)
        return self if size == self.batch_size else replace(self, batch_size=size)

    @property
    def rows(self) -> int:
        """Hypotheses decoded side by side per sentence: the beam, or the samples drawn."""
        return self.nbest if self.sampling else self.beam_size

    def with_search(self, **search: object) -> DecodeConfig:
        """These search options (DecodeConfig fields) on top of this config; an ``nbest``
        larger than the beam widens the beam, unless ``beam_size`` is given too (or ``nbest`` is
        beyond the beam's range: then the error names ``nbest``, the option given)."""
        nbest, widest = search.get("nbest", 1), range_of(DecodeConfig, "beam_size").high
        widen = isinstance(nbest, int) and self.beam_size < nbest <= widest
        if widen and "beam_size" not in search:
            search = {**search, "beam_size": nbest}
        return replace(self, **search)
