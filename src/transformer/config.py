"""The typed configuration: the single source of truth for every size and switch.

Frozen dataclasses, one per concern. YAML files and ``--key value`` overrides only fill them
(see ``load_config``); modules receive these objects or plain arguments, never dicts.

Special token ids are fixed project-wide so that a model, its tokenizer and its masks agree.
"""

from __future__ import annotations

import contextlib
import math
import typing
from dataclasses import asdict, dataclass, fields, replace

import yaml

from .errors import BadValue, UserError

PAD_ID = 0  # padding: masked out of attention and of the loss
UNK_ID = 1  # unknown piece
BOS_ID = 2  # <s>: the decoder's first input ("outputs shifted right")
EOS_ID = 3  # </s>: generation stops here

POSITIONAL_KINDS = ("sinusoidal", "learned")


def _check_finite(obj: object) -> None:
    """Every float field must be a finite number: inf and nan are never meaningful settings."""
    for f in fields(obj):  # type: ignore[arg-type]
        value = getattr(obj, f.name)
        if isinstance(value, float) and not math.isfinite(value):
            raise BadValue(f"{type(obj).__name__}.{f.name} must be a finite number, got {value!r}")


def _check_positive(obj: object, *names: str) -> None:
    for name in names:
        value = getattr(obj, name)
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            raise BadValue(f"{type(obj).__name__}.{name} must be a positive integer, got {value!r}")


def _check_probability(obj: object, *names: str) -> None:
    for name in names:
        value = getattr(obj, name)
        if not 0.0 <= value < 1.0:
            raise BadValue(f"{type(obj).__name__}.{name} must be in [0, 1), got {value!r}")


@dataclass(frozen=True)
class ModelConfig:
    """Sizes and switches of the encoder-decoder Transformer (Vaswani et al. 2017, Table 3).

    ``d_model`` is the width of every token vector, split into ``n_heads`` heads of
    ``d_model // n_heads``; ``d_ff`` is the inner width of the position-wise feed-forward network.
    """

    src_vocab_size: int = 32000
    tgt_vocab_size: int = 32000
    d_model: int = 512
    n_heads: int = 8
    d_ff: int = 2048
    n_encoder_layers: int = 6
    n_decoder_layers: int = 6
    dropout: float = 0.1  # on embeddings + positions and on every sublayer output (§5.4)
    attention_dropout: float = 0.0  # on the attention weights
    activation_dropout: float = 0.0  # inside the feed-forward network, after the ReLU
    max_positions: int = 1024  # longest sequence the positional encoding accepts
    positional: str = "sinusoidal"  # "sinusoidal" (§3.5) or "learned" embeddings
    norm_first: bool = False  # False: post-norm as in the paper; True: pre-norm
    layer_norm_eps: float = 1e-5
    share_embeddings: bool = False  # one embedding table for source and target (needs one vocab)
    tie_output: bool = True  # output projection reuses the target embedding matrix (§3.4)

    def __post_init__(self) -> None:
        _check_finite(self)
        _check_positive(
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
        _check_probability(self, "dropout", "attention_dropout", "activation_dropout")
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


CORPORA = ("numbers", "multi30k", "tatoeba-fra-eng", "tatoeba-deu-eng")
TOKENIZER_KINDS = ("bpe", "unigram")


@dataclass(frozen=True)
class DataConfig:
    """Where the parallel text comes from and how it becomes token ids.

    Either a named ``corpus`` or files: ``src``/``tgt`` line-aligned text (plain or .gz), or a
    TSV of pairs in ``src`` alone (``english<TAB>other[<TAB>attribution]``, also inside a .zip).
    """

    corpus: str | None = "numbers"  # a name from CORPORA, or None when files are given
    src_lang: str = "en"
    tgt_lang: str = "fr"
    data_dir: str | None = None  # local folder holding a named corpus (else it is downloaded)
    src: str | None = None  # training source file, or a TSV/zip of pairs
    tgt: str | None = None  # training target file (omit for TSV)
    valid_src: str | None = None
    valid_tgt: str | None = None
    valid_fraction: float = 0.02  # held out with split_seed when no validation files are given
    test_fraction: float = 0.02  # likewise for a test split (multi30k and numbers bring their own)
    split_seed: int = 1234
    max_len: int = 128  # tokens per side; longer training pairs are filtered and counted
    tokenizer: str = "bpe"  # SentencePiece model type: "bpe" or "unigram"
    vocab_size: int = 8000  # per vocabulary (joint: for both languages)
    joint_vocab: bool = True  # one SentencePiece model for both languages
    character_coverage: float = 1.0
    verify_checksums: bool = True  # refuse a downloaded corpus file whose SHA-256 has changed
    numbers_max: int = 999_999  # numbers corpus: numbers are drawn from 0..numbers_max
    numbers_train: int = 100_000  # numbers corpus: sizes of the disjoint splits
    numbers_valid: int = 1_000
    numbers_test: int = 1_000

    def __post_init__(self) -> None:
        _check_finite(self)
        if self.corpus is not None and self.corpus not in CORPORA:
            raise BadValue(
                f"DataConfig.corpus must be one of {CORPORA} or null, got {self.corpus!r}"
            )
        if self.tokenizer not in TOKENIZER_KINDS:
            raise BadValue(
                f"DataConfig.tokenizer must be one of {TOKENIZER_KINDS}, got {self.tokenizer!r}"
            )
        _check_positive(self, "max_len", "vocab_size", "numbers_max", "numbers_train")
        _check_probability(self, "valid_fraction", "test_fraction")
        if not 0.0 < self.character_coverage <= 1.0:
            raise BadValue(
                f"DataConfig.character_coverage must be in (0, 1], got {self.character_coverage!r}"
            )


@dataclass(frozen=True)
class TrainConfig:
    """Optimisation and bookkeeping (Vaswani et al. §5.3-5.4)."""

    max_tokens: int = 4096  # source + target tokens per batch, padding included
    max_steps: int = 100_000  # optimiser updates
    max_epochs: int = 0  # 0: no limit
    max_minutes: float = 0.0  # wall-clock budget; 0: no limit
    lr_factor: float = 1.0  # lr = factor · d_model^-0.5 · min(step^-0.5, step · warmup^-1.5)
    peak_lr: float = 0.0  # if > 0: the factor is chosen so that the lr peaks at this value
    warmup_steps: int = 4000
    adam_beta1: float = 0.9
    adam_beta2: float = 0.98
    adam_eps: float = 1e-9
    weight_decay: float = 0.0
    label_smoothing: float = 0.1  # ε_ls; 0 is plain cross-entropy against one-hot targets
    clip_norm: float = 1.0  # max gradient norm; 0: no clipping
    accumulate: int = 1  # batches per optimiser update
    bf16: bool = False  # bfloat16 autocast for the forward pass
    seed: int = 1
    log_every: int = 50  # steps between log lines
    validate_every: int = 500  # steps between validations (and at the end)
    bleu_sentences: int = 200  # validation sentences decoded for BLEU; 0: loss only
    best_metric: str = "bleu"  # what picks the "best" checkpoint: "bleu" (if measured) or "loss"
    save_every: int = 500  # steps between checkpoints (and at the end)
    keep_checkpoints: int = 5  # step checkpoints kept for `transformer average`
    threads: int = 0  # torch intra-op threads; 0: torch's default

    def __post_init__(self) -> None:
        _check_finite(self)
        _check_positive(
            self, "max_tokens", "max_steps", "warmup_steps", "accumulate", "log_every",
            "validate_every", "save_every", "keep_checkpoints",
        )  # fmt: skip
        _check_probability(self, "label_smoothing")
        for name in ("peak_lr", "max_minutes", "weight_decay", "clip_norm", "max_epochs"):
            if getattr(self, name) < 0:
                raise BadValue(f"TrainConfig.{name} must be >= 0, got {getattr(self, name)!r}")
        for name in ("lr_factor", "adam_eps"):
            if getattr(self, name) <= 0:
                raise BadValue(f"TrainConfig.{name} must be > 0, got {getattr(self, name)!r}")
        for name in ("adam_beta1", "adam_beta2"):
            _check_probability(self, name)
        if self.best_metric not in ("bleu", "loss"):
            raise BadValue(
                f"TrainConfig.best_metric must be 'bleu' or 'loss', got {self.best_metric!r}"
            )


@dataclass(frozen=True)
class DecodeConfig:
    """How translations are searched for (§6.1: beam 4, α = 0.6, max length input + 50)."""

    beam_size: int = 4  # 1 = greedy search
    length_penalty: float = 0.6  # GNMT α: score = log P / ((5 + |y|) / 6)^α; 0: none
    max_len_a: float = 1.0  # output at most a · source length + b tokens
    max_len_b: int = 50
    nbest: int = 1  # hypotheses returned per sentence (<= beam_size)
    sampling: bool = False  # sample instead of searching
    temperature: float = 1.0
    top_k: int = 0  # sample from the k most likely tokens; 0: all
    batch_size: int = 64  # sentences per batch
    max_source_tokens: int = 8192  # source tokens per batch, padding included

    def __post_init__(self) -> None:
        _check_finite(self)
        _check_positive(self, "beam_size", "nbest", "batch_size", "max_source_tokens")
        if self.nbest > self.beam_size and not self.sampling:
            raise BadValue(
                f"DecodeConfig.nbest ({self.nbest}) cannot exceed beam_size ({self.beam_size})"
            )
        if self.temperature <= 0:
            raise BadValue(f"DecodeConfig.temperature must be > 0, got {self.temperature!r}")
        for name in ("length_penalty", "max_len_a", "max_len_b", "top_k"):
            if getattr(self, name) < 0:
                raise BadValue(f"DecodeConfig.{name} must be >= 0, got {getattr(self, name)!r}")


SECTIONS = {"model": ModelConfig, "data": DataConfig, "train": TrainConfig, "decode": DecodeConfig}


@dataclass(frozen=True)
class RunConfig:
    """Everything about one run; saved as JSON inside every checkpoint."""

    model: ModelConfig = ModelConfig()
    data: DataConfig = DataConfig()
    train: TrainConfig = TrainConfig()
    decode: DecodeConfig = DecodeConfig()

    def to_dict(self) -> dict[str, dict[str, object]]:
        return {name: asdict(getattr(self, name)) for name in SECTIONS}

    @classmethod
    def from_dict(cls, values: dict, origin: str = "config") -> RunConfig:
        """Builds a RunConfig from {section: {key: value}}; unknown keys are errors."""
        return _build(values, {}, origin)


def _field_types(cls: type) -> dict[str, object]:
    return typing.get_type_hints(cls)


def _coerce(section: str, key: str, value: object, expected: object, origin: str) -> object:
    """Checks (and for CLI strings, converts) one value against the dataclass field's type."""
    allowed = typing.get_args(expected) or (expected,)
    if isinstance(value, str) and expected is not str:
        value = yaml.safe_load(value) if value.strip() else value  # "100" -> 100, "true" -> True
    if isinstance(value, str) and float in allowed:
        with contextlib.suppress(ValueError):  # YAML 1.1 reads "3e-4" (no dot) as a string
            value = float(value)
    if value is None and type(None) in allowed:
        return None
    if bool in allowed and isinstance(value, bool):
        return value
    if int in allowed and isinstance(value, int) and not isinstance(value, bool):
        return value
    if float in allowed and isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if str in allowed and isinstance(value, str):
        return value
    names = " or ".join(getattr(t, "__name__", str(t)) for t in allowed)
    raise UserError(f"{origin}: {section}.{key} must be {names}, got {value!r}")


def _build(values: dict, overrides: dict[str, str], origin: str) -> RunConfig:
    sections: dict[str, dict[str, object]] = {name: {} for name in SECTIONS}
    preset = "small"
    for section, body in (values or {}).items():
        if section not in SECTIONS:
            raise UserError(f"{origin}: unknown config section {section!r}; use {list(SECTIONS)}")
        if not isinstance(body, dict):
            raise UserError(f"{origin}: section {section!r} must be a mapping of key: value")
        for key, value in body.items():
            if section == "model" and key == "preset":
                preset = str(value)
            else:
                sections[section][key] = (value, origin)
    for raw_key, value in overrides.items():
        if raw_key == "preset":
            preset = value
            continue
        section, key = _resolve_key(raw_key)
        sections[section][key] = (value, f"--{raw_key}")
    built = {}
    for section, cls in SECTIONS.items():
        types = _field_types(cls)
        kwargs = {}
        for key, (value, where) in sections[section].items():
            if key not in types:
                raise UserError(f"{where}: unknown config key {section}.{key!r}")
            kwargs[key] = _coerce(section, key, value, types[key], where)
        base = ModelConfig.preset(preset) if section == "model" else cls()
        built[section] = replace(base, **kwargs)
    return RunConfig(**built)


def _resolve_key(raw: str) -> tuple[str, str]:
    """'train.max_steps', 'max-steps' or 'max_steps' -> ('train', 'max_steps')."""
    name = raw.replace("-", "_")
    if "." in name:
        section, key = name.split(".", 1)
        if section in SECTIONS:
            return section, key
        raise UserError(f"--{raw}: unknown config section {section!r}; use {list(SECTIONS)}")
    owners = [section for section, cls in SECTIONS.items() if name in _field_types(cls)]
    if not owners:
        raise UserError(f"--{raw}: unknown config key {name!r}")
    return owners[0], name  # keys are unique across sections (tested)


def parse_overrides(args: list[str]) -> dict[str, str]:
    """['--train.max_steps', '100', '--bf16=true'] -> {'train.max_steps': '100', 'bf16': 'true'}."""
    overrides: dict[str, str] = {}
    i = 0
    while i < len(args):
        flag = args[i]
        if not flag.startswith("--") or len(flag) == 2:
            raise UserError(f"expected --key value, got {flag!r}")
        if "=" in flag:
            key, value = flag[2:].split("=", 1)
            i += 1
        elif i + 1 < len(args) and not args[i + 1].startswith("--"):
            key, value = flag[2:], args[i + 1]
            i += 2
        else:
            raise UserError(f"{flag} needs a value")
        overrides[key] = value
    return overrides


def load_config(
    path: str | None = None, overrides: dict[str, str] | None = None, base: dict | None = None
) -> RunConfig:
    """Reads a YAML file ({section: {key: value}}, all optional) and applies overrides.

    ``model.preset`` (or ``--preset``) picks the starting ModelConfig; the default is ``small``.
    ``base`` (e.g. a saved run's config) is used instead of a file when ``path`` is None.
    """
    values: dict = base or {}
    origin = "overrides"
    if path is not None:
        origin = path
        try:
            with open(path, encoding="utf-8") as f:
                values = yaml.safe_load(f) or {}
        except FileNotFoundError:
            raise UserError(f"config file not found: {path}") from None
        except yaml.YAMLError as error:
            raise UserError(f"{path}: not valid YAML: {str(error).splitlines()[0]}") from None
        if not isinstance(values, dict):
            raise UserError(f"{path}: expected a mapping of sections {list(SECTIONS)}")
    try:
        return _build(values, overrides or {}, origin)
    except ValueError as error:
        raise UserError(f"{origin}: {error}") from None
