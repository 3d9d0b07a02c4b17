"""How translations are searched for: greedy, beam search or sampling, and their limits."""

from __future__ import annotations

from dataclasses import dataclass, replace

from ..errors import BadValue
from .checks import check_finite, check_positive, check_types


@dataclass(frozen=True)
class DecodeConfig:
    """How translations are searched for (§6.1: beam 4, α = 0.6, max length input + 50)."""

    beam_size: int = 4
    """1 = greedy search."""
    length_penalty: float = 0.6
    """GNMT α: score = log P / ((5 + |y|) / 6)^α; 0: none."""
    max_len_a: float = 1.0
    """Output at most a · source length + b tokens."""
    max_len_b: int = 50
    """Output length limit: a · source length + b tokens."""
    nbest: int = 1
    """Hypotheses returned per sentence (<= beam_size)."""
    sampling: bool = False
    """Sample instead of searching."""
    temperature: float = 1.0
    """Sampling temperature: < 1 sharper, > 1 flatter."""
    top_k: int = 0
    """Sample from the k most likely tokens; 0: all."""
    top_p: float = 1.0
    """Sample from the fewest most likely tokens whose probability reaches p (nucleus); 1: all."""
    min_len: int = 0
    """No EOS before this many output tokens (a prefix counts); 0: none."""
    no_repeat_ngram: int = 0
    """No n-gram of target pieces twice in one output; 0: off."""
    repetition_penalty: float = 1.0
    """Tokens already in the output have their logit divided by this (multiplied if negative,
    CTRL), in [0.01, 100]; > 1 discourages repeats; 1: off."""
    alignment: bool = False
    """Also give word alignments (Pharaoh i-j, source-target, 0-based) from attention."""
    batch_size: int = 64
    """Sentences per batch."""
    max_source_tokens: int = 8192
    """Source tokens per batch, padding included."""
    target_language: str = ""
    """For a model with several target languages (Marian's >>xxx<< tokens): the one to
    translate into, e.g. fra; its token goes before every source sentence."""

    def __post_init__(self) -> None:
        check_types(self)
        check_finite(self)
        check_positive(self, "beam_size", "nbest", "batch_size", "max_source_tokens")
        if self.nbest > self.beam_size and not self.sampling:
            raise BadValue(
                f"DecodeConfig.nbest ({self.nbest}) cannot exceed beam_size ({self.beam_size})"
            )
        if self.temperature <= 0:
            raise BadValue(f"DecodeConfig.temperature must be > 0, got {self.temperature!r}")
        for name in ("length_penalty", "max_len_a", "max_len_b", "top_k", "min_len",
                     "no_repeat_ngram"):  # fmt: skip
            if getattr(self, name) < 0:
                raise BadValue(f"DecodeConfig.{name} must be >= 0, got {getattr(self, name)!r}")
        if not 0 < self.top_p <= 1:
            raise BadValue(f"DecodeConfig.top_p must be in (0, 1], got {self.top_p!r}")
        # Beyond these bounds a float32 logit may overflow to inf (and the search to NaN).
        if not 0.01 <= self.repetition_penalty <= 100:
            raise BadValue(f"DecodeConfig.repetition_penalty must be in [0.01, 100], got "
                           f"{self.repetition_penalty!r}")  # fmt: skip
        if self.max_len_a == 0 and self.min_len > self.max_len_b:
            raise BadValue(
                f"DecodeConfig.min_len ({self.min_len}) is above the length limit max_len_b "
                f"({self.max_len_b})"
            )

    def with_search(self, **search: object) -> DecodeConfig:
        """These search options (DecodeConfig fields) on top of this config; an ``nbest``
        larger than the beam widens the beam, unless ``beam_size`` is given too."""
        nbest = search.get("nbest", 1)
        if isinstance(nbest, int) and nbest > self.beam_size and "beam_size" not in search:
            search = {**search, "beam_size": nbest}
        return replace(self, **search)
