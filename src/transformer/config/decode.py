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
        for name in ("length_penalty", "max_len_a", "max_len_b", "top_k"):
            if getattr(self, name) < 0:
                raise BadValue(f"DecodeConfig.{name} must be >= 0, got {getattr(self, name)!r}")

    def with_search(self, **search: object) -> DecodeConfig:
        """These search options (DecodeConfig fields) on top of this config; an ``nbest``
        larger than the beam widens the beam, unless ``beam_size`` is given too."""
        nbest = search.get("nbest", 1)
        if isinstance(nbest, int) and nbest > self.beam_size and "beam_size" not in search:
            search = {**search, "beam_size": nbest}
        return replace(self, **search)
