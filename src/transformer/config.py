"""The typed configuration: the single source of truth for every size and switch.

Frozen dataclasses, one per concern. YAML files and ``--key value`` overrides only fill them
(see ``load_config``); modules receive these objects or plain arguments, never dicts.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, replace

from .config_checks import check_finite, check_positive, check_probability, check_types
from .config_serve import ServeConfig
from .errors import BadValue

POSITIONAL_KINDS = ("sinusoidal", "learned")


@dataclass(frozen=True)
class ModelConfig:
    """Sizes and switches of the encoder-decoder Transformer (Vaswani et al. 2017, Table 3).

    ``d_model`` is the width of every token vector, split into ``n_heads`` heads of
    ``d_model // n_heads``; ``d_ff`` is the inner width of the position-wise feed-forward network.
    """

    src_vocab_size: int = 32000
    """Source vocabulary size (filled in from the tokenizer when training)."""
    tgt_vocab_size: int = 32000
    """Target vocabulary size (filled in from the tokenizer when training)."""
    d_model: int = 512
    """Width of every token vector (the paper's d_model)."""
    n_heads: int = 8
    """Attention heads h; each has width d_model / h."""
    d_ff: int = 2048
    """Inner width of the position-wise feed-forward network."""
    n_encoder_layers: int = 6
    """Encoder layers N."""
    n_decoder_layers: int = 6
    """Decoder layers N."""
    dropout: float = 0.1
    """On embeddings + positions and on every sublayer output (§5.4)."""
    attention_dropout: float = 0.0
    """On the attention weights."""
    activation_dropout: float = 0.0
    """Inside the feed-forward network, after the ReLU."""
    max_positions: int = 1024
    """Longest sequence the positional encoding accepts."""
    positional: str = "sinusoidal"
    """"sinusoidal" (§3.5) or "learned" embeddings."""
    norm_first: bool = False
    """False: post-norm as in the paper; True: pre-norm."""
    layer_norm_eps: float = 1e-5
    """The ε of layer normalisation."""
    share_embeddings: bool = False
    """One embedding table for source and target (needs one vocab)."""
    tie_output: bool = True
    """Output projection reuses the target embedding matrix (§3.4)."""

    def __post_init__(self) -> None:
        check_types(self)
        check_finite(self)
        check_positive(
            self,
            "src_vocab_size",
            "tgt_vocab_size",
            "d_model",
            "n_heads",
            "d_ff",
            "n_encoder_layers",
            "n_decoder_layers",
            "max_positions",
        )
        if self.d_model % self.n_heads:
            raise BadValue(
                f"ModelConfig.d_model ({self.d_model}) must be divisible by "
                f"ModelConfig.n_heads ({self.n_heads})"
            )
        check_probability(self, "dropout", "attention_dropout", "activation_dropout")
        if self.positional not in POSITIONAL_KINDS:
            raise BadValue(
                f"ModelConfig.positional must be one of {POSITIONAL_KINDS}, got {self.positional!r}"
            )
        if self.layer_norm_eps <= 0:
            raise BadValue(f"ModelConfig.layer_norm_eps must be > 0, got {self.layer_norm_eps!r}")
        if self.share_embeddings and self.src_vocab_size != self.tgt_vocab_size:
            raise BadValue(
                "ModelConfig.share_embeddings needs src_vocab_size == tgt_vocab_size, got "
                f"{self.src_vocab_size} and {self.tgt_vocab_size}"
            )

    @property
    def d_head(self) -> int:
        return self.d_model // self.n_heads

    @classmethod
    def preset(cls, name: str, **overrides: object) -> ModelConfig:
        """A named preset (``tiny``, ``small``, ``base``, ``big``) with fields overridden."""
        if name not in MODEL_PRESETS:
            raise BadValue(f"unknown model preset {name!r}; choose from {sorted(MODEL_PRESETS)}")
        return replace(MODEL_PRESETS[name], **overrides)


MODEL_PRESETS: dict[str, ModelConfig] = {
    # For tests: a few thousand parameters, milliseconds per step.
    "tiny": ModelConfig(
        d_model=32, n_heads=4, d_ff=64, n_encoder_layers=2, n_decoder_layers=2, max_positions=256
    ),
    # For CPU work (the demo and Multi30k on two cores).
    "small": ModelConfig(
        d_model=256, n_heads=4, d_ff=1024, n_encoder_layers=3, n_decoder_layers=3, max_positions=512
    ),
    # The paper's base model (Table 3, row "base").
    "base": ModelConfig(),
    # The paper's big model (Table 3, row "big"): dropout 0.3 as used for EN-DE.
    "big": ModelConfig(d_model=1024, n_heads=16, d_ff=4096, dropout=0.3),
}


TOKENIZER_KINDS = ("bpe", "unigram")


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
    """Seed of the train / valid / test split."""
    max_len: int = 128
    """Tokens per side; longer training pairs are filtered and counted."""
    tokenizer: str = "bpe"
    """SentencePiece model type: "bpe" or "unigram"."""
    vocab_size: int = 8000
    """Per vocabulary (joint: for both languages)."""
    tokenizer_sample: int = 1_000_000
    """Pairs SentencePiece trains on at most, drawn at random (split_seed) from the training
    pairs: memory stays bounded however large the corpus."""
    joint_vocab: bool = True
    """One SentencePiece model for both languages."""
    character_coverage: float = 1.0
    """Share of characters SentencePiece must cover, in (0, 1]."""
    verify_checksums: bool = True
    """Refuse a downloaded corpus file whose SHA-256 has changed."""
    numbers_max: int = 999_999
    """Numbers corpus: numbers are drawn from 0..numbers_max."""
    numbers_train: int = 100_000
    """Numbers corpus: sizes of the disjoint splits."""
    numbers_valid: int = 1_000
    """Numbers corpus: size of the validation split."""
    numbers_test: int = 1_000
    """Numbers corpus: size of the test split."""

    def __post_init__(self) -> None:
        check_types(self)
        check_finite(self)
        if self.tokenizer not in TOKENIZER_KINDS:
            raise BadValue(
                f"DataConfig.tokenizer must be one of {TOKENIZER_KINDS}, got {self.tokenizer!r}"
            )
        check_positive(self, "max_len", "vocab_size", "tokenizer_sample", "numbers_max",
                       "numbers_train")  # fmt: skip
        check_probability(self, "valid_fraction", "test_fraction")
        if not 0.0 < self.character_coverage <= 1.0:
            raise BadValue(
                f"DataConfig.character_coverage must be in (0, 1], got {self.character_coverage!r}"
            )


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
    accumulate: int = 1
    """Batches per optimiser update."""
    seed: int = 1
    """Seed of initialisation, dropout and data order."""
    log_every: int = 50
    """Steps between log lines."""
    validate_every: int = 500
    """Steps between validations (and at the end)."""
    bleu_sentences: int = 200
    """Validation sentences decoded for BLEU; 0: loss only."""
    best_metric: str = "bleu"
    """What picks the "best" checkpoint: "bleu" (if measured) or "loss"."""
    save_every: int = 500
    """Steps between checkpoints (and at the end)."""
    keep_checkpoints: int = 5
    """Step checkpoints kept for `transformer average`."""

    def __post_init__(self) -> None:
        check_types(self)
        check_finite(self)
        check_positive(
            self, "max_tokens", "max_steps", "warmup_steps", "accumulate", "log_every",
            "validate_every", "save_every", "keep_checkpoints",
        )  # fmt: skip
        check_probability(self, "label_smoothing", "cooldown")
        for name in ("peak_lr", "max_minutes", "weight_decay", "clip_norm", "max_epochs"):
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


PRECISIONS = ("fp32", "bf16", "fp16")


@dataclass(frozen=True)
class RuntimeConfig:
    """Where and how the computation runs (device.py). Not part of the model: a run may change
    it when resumed, and translate / evaluate take it from the command line, not the checkpoint."""

    device: str = "auto"
    """auto (CUDA when there is a GPU, else the CPU), cpu, cuda or cuda:N."""
    precision: str = "fp32"
    """fp32, bf16 (autocast) or fp16 (autocast and a GradScaler)."""
    compile: bool = False
    """torch.compile the model for training."""
    threads: int = 0
    """Torch intra-op threads on the CPU; 0: torch's default."""
    timeout_minutes: float = 30.0
    """Under torchrun: how long a process waits for the others before the job fails."""

    def __post_init__(self) -> None:
        check_types(self)
        check_finite(self)
        if self.timeout_minutes <= 0:
            raise BadValue(
                f"RuntimeConfig.timeout_minutes must be > 0, got {self.timeout_minutes!r}"
            )
        if self.precision not in PRECISIONS:
            raise BadValue(
                f"RuntimeConfig.precision must be one of {PRECISIONS}, got {self.precision!r}"
            )
        if not re.fullmatch(r"auto|cpu|cuda(:\d+)?", self.device):
            raise BadValue(
                f"RuntimeConfig.device must be auto, cpu, cuda or cuda:N, got {self.device!r}"
            )
        if self.threads < 0:
            raise BadValue(f"RuntimeConfig.threads must be >= 0, got {self.threads!r}")


SECTIONS = {"model": ModelConfig, "data": DataConfig, "train": TrainConfig, "decode": DecodeConfig,
            "runtime": RuntimeConfig}  # fmt: skip
# Every section a command can take: the run's, and the service's (never saved with a run).
COMMAND_SECTIONS = {**SECTIONS, "serve": ServeConfig}


@dataclass(frozen=True)
class RunConfig:
    """Everything about one run; saved as JSON inside every checkpoint."""

    model: ModelConfig = ModelConfig()
    data: DataConfig = DataConfig()
    train: TrainConfig = TrainConfig()
    decode: DecodeConfig = DecodeConfig()
    runtime: RuntimeConfig = RuntimeConfig()

    def to_dict(self) -> dict[str, dict[str, object]]:
        return {name: asdict(getattr(self, name)) for name in SECTIONS}
