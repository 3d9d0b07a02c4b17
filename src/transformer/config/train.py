"""Optimisation and bookkeeping of a training run (Vaswani et al. §5.3-5.4)."""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import BadValue
from .checks import (
    check_finite,
    check_positive,
    check_probability,
    check_ranges,
    check_seeds,
    check_types,
    ranged,
)

# A step reads accumulate batches before its update, and max_minutes and a stop signal are
# looked at only between steps (the first checkpoint comes after the first step): 4,096
# batches of the default 4,096 tokens are 16.8M tokens per update, 40x the largest batches of
# Ott et al. 2018 "Scaling Neural Machine Translation" (400k), and take minutes, not forever.
MAX_ACCUMULATE = 4096


@dataclass(frozen=True)
class TrainConfig:
    """Optimisation and bookkeeping (Vaswani et al. §5.3-5.4)."""

    max_tokens: int = 4096
    """Source + target tokens per batch, padding included."""
    max_steps: int = 100_000
    """Optimiser updates."""
    max_epochs: int = 0
    """0: no limit."""
    max_minutes: float = 0.0
    """Wall-clock budget; 0: no limit."""
    lr_factor: float = 1.0
    """Lr = factor · d_model^-0.5 · min(step^-0.5, step · warmup^-1.5)."""
    peak_lr: float = 0.0
    """If > 0: the factor is chosen so that the lr peaks at this value."""
    warmup_steps: int = 4000
    """Steps of linear learning-rate warmup (§5.3)."""
    cooldown: float = 0.0
    """Last share of the run (of max_steps, or max_minutes if that ends first) over which the
    rate falls linearly to 0; 0: none (the paper)."""
    adam_beta1: float = 0.9
    """Adam β1 (§5.3)."""
    adam_beta2: float = 0.98
    """Adam β2 (§5.3)."""
    adam_eps: float = 1e-9
    """Adam ε (§5.3)."""
    weight_decay: float = 0.0
    """AdamW decay of the weight matrices (never biases, norms, embeddings); 0 as in the paper."""
    label_smoothing: float = 0.1
    """ε_ls (§5.4); 0 is plain cross-entropy against one-hot targets."""
    clip_norm: float = 1.0
    """Max gradient norm; 0: no clipping."""
    accumulate: int = ranged(1, 1, MAX_ACCUMULATE)
    """Batches per optimiser update; in [1, 4096]."""
    seed: int = 1
    """Seed of initialisation, dropout and data order; 0 to 4,294,967,295."""
    log_every: int = 50
    """Steps between log lines."""
    validate_every: int = 500
    """Steps between validations (and at the end)."""
    bleu_sentences: int = 200
    """Validation sentences decoded for BLEU; 0: loss only."""
    best_metric: str = "bleu"
    """What picks the "best" checkpoint: "bleu" (if measured) or "loss"."""
    patience: int = 0
    """Stop after this many validations in a row without a better best_metric; 0: never."""
    save_every: int = 500
    """Steps between checkpoints (and at the end)."""
    keep_checkpoints: int = 5
    """Step checkpoints kept for `transformer average`."""
    init_from: str | None = None
    """Fine-tune: start from this model directory's weights and tokenizers (its architecture;
    this run's dropout keys apply); a fresh optimizer and schedule."""

    def __post_init__(self) -> None:
        check_types(self)
        check_finite(self)
        check_ranges(self)
        check_positive(
            self, "max_tokens", "max_steps", "warmup_steps", "log_every", "validate_every",
            "save_every", "keep_checkpoints",
        )  # fmt: skip
        check_probability(self, "label_smoothing", "cooldown")
        check_seeds(self, "seed")
        for name in ("peak_lr", "max_minutes", "weight_decay", "clip_norm", "max_epochs",
                     "patience", "bleu_sentences"):  # fmt: skip
            if getattr(self, name) < 0:
                raise BadValue(f"TrainConfig.{name} must be >= 0, got {getattr(self, name)!r}")
        for name in ("lr_factor", "adam_eps"):
            if getattr(self, name) <= 0:
                raise BadValue(f"TrainConfig.{name} must be > 0, got {getattr(self, name)!r}")
        for name in ("adam_beta1", "adam_beta2"):
            check_probability(self, name)
        if self.best_metric not in ("bleu", "loss"):
            raise BadValue(
                f"TrainConfig.best_metric must be 'bleu' or 'loss', got {self.best_metric!r}"
            )
