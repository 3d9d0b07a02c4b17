"""The typed configuration: the single source of truth for every size and switch.

Frozen dataclasses, one per concern. YAML files and ``--key value`` overrides only fill them
(see ``load_config``); modules receive these objects or plain arguments, never dicts.

Special token ids are fixed project-wide so that a model, its tokenizer and its masks agree.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

PAD_ID = 0  # padding: masked out of attention and of the loss
UNK_ID = 1  # unknown piece
BOS_ID = 2  # <s>: the decoder's first input ("outputs shifted right")
EOS_ID = 3  # </s>: generation stops here

POSITIONAL_KINDS = ("sinusoidal", "learned")


def _check_positive(obj: object, *names: str) -> None:
    for name in names:
        value = getattr(obj, name)
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            raise ValueError(
                f"{type(obj).__name__}.{name} must be a positive integer, got {value!r}"
            )


def _check_probability(obj: object, *names: str) -> None:
    for name in names:
        value = getattr(obj, name)
        if not 0.0 <= value < 1.0:
            raise ValueError(f"{type(obj).__name__}.{name} must be in [0, 1), got {value!r}")


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
            raise ValueError(
                f"ModelConfig.d_model ({self.d_model}) must be divisible by "
                f"ModelConfig.n_heads ({self.n_heads})"
            )
        _check_probability(self, "dropout", "attention_dropout", "activation_dropout")
        if self.positional not in POSITIONAL_KINDS:
            raise ValueError(
                f"ModelConfig.positional must be one of {POSITIONAL_KINDS}, got {self.positional!r}"
            )
        if self.layer_norm_eps <= 0:
            raise ValueError(f"ModelConfig.layer_norm_eps must be > 0, got {self.layer_norm_eps!r}")
        if self.share_embeddings and self.src_vocab_size != self.tgt_vocab_size:
            raise ValueError(
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
            raise ValueError(f"unknown model preset {name!r}; choose from {sorted(MODEL_PRESETS)}")
        return replace(MODEL_PRESETS[name], **overrides)

    def to_dict(self) -> dict[str, object]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


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
