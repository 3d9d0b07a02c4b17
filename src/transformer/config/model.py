"""The model's sizes and switches (Vaswani et al. 2017, Table 3), and the named presets."""

from __future__ import annotations

from dataclasses import dataclass, replace

from ..errors import BadValue
from .checks import check_finite, check_probability, check_sizes, check_types

POSITIONAL_KINDS = ("sinusoidal", "learned")
POSITIONAL_LAYOUTS = ("interleaved", "halves")
ACTIVATIONS = ("relu", "gelu", "silu", "swish")
ARCHITECTURES = ("transformer", "rnn")
RNN_CELLS = ("gru", "lstm")
RNN_ATTENTIONS = ("none", "bahdanau", "luong")
# The largest size of each kind that a model may have, wherever its config comes from (the command
# line, YAML, a model's config.json, an import): Vaswani et al.'s big model has d_model 1,024,
# d_ff 4,096 and 6 + 6 layers; OPUS-MT's vocabularies have about 60,000 pieces. Beyond these a
# number is a mistake, whose tables could not be built (10^12 positions) or take hours to
# (10^7 layers); below them, whether the weights fit is the memory check's (model/build.py).
SIZE_LIMITS = {
    "src_vocab_size": 1_048_576, "tgt_vocab_size": 1_048_576, "d_model": 65_536,
    "n_heads": 1_024, "d_ff": 262_144, "n_encoder_layers": 1_000, "n_decoder_layers": 1_000,
    "max_positions": 65_536, "rnn_hidden": 65_536, "rnn_layers": 1_000, "rnn_embedding": 65_536,
}  # fmt: skip
# The keys only the RNN encoder-decoder reads; the Transformer ignores them (and the RNN ignores
# the Transformer's sizes: d_model, n_heads, d_ff, the layer counts, positional, norm_first, ...).
RNN_KEYS = ("rnn_cell", "rnn_attention", "rnn_hidden", "rnn_layers", "rnn_embedding",
            "rnn_dropout")  # fmt: skip


@dataclass(frozen=True)
class ModelConfig:
    """Sizes and switches of the encoder-decoder Transformer (Vaswani et al. 2017, Table 3).

    ``d_model`` is the width of every token vector, split into ``n_heads`` heads of
    ``d_model // n_heads``; ``d_ff`` is the inner width of the position-wise feed-forward network.
    ``architecture: rnn`` builds the Transformer's predecessor instead, the RNN encoder-decoder
    with or without attention (Bahdanau et al. 2015; Luong et al. 2015), sized by the ``rnn_*``
    keys. Vocabulary sizes, ``max_positions``, ``share_embeddings`` and ``tie_output`` apply to
    both.
    """

    src_vocab_size: int = 32000
    """Source vocabulary size (filled in from the tokenizer when training); at most 1,048,576."""
    tgt_vocab_size: int = 32000
    """Target vocabulary size (filled in from the tokenizer when training); at most 1,048,576."""
    d_model: int = 512
    """Width of every token vector (the paper's d_model); at most 65,536."""
    n_heads: int = 8
    """Attention heads h; each has width d_model / h; at most 1,024."""
    d_ff: int = 2048
    """Inner width of the position-wise feed-forward network; at most 262,144."""
    n_encoder_layers: int = 6
    """Encoder layers N; at most 1,000."""
    n_decoder_layers: int = 6
    """Decoder layers N; at most 1,000."""
    dropout: float = 0.1
    """On embeddings + positions and on every sublayer output (§5.4)."""
    attention_dropout: float = 0.0
    """On the attention weights."""
    activation_dropout: float = 0.0
    """Inside the feed-forward network, after the activation."""
    activation: str = "relu"
    """Of the feed-forward network: "relu" (§3.3), "gelu", or "silu" (= "swish", most
    OPUS-MT models)."""
    max_positions: int = 1024
    """Longest sequence the positional encoding accepts; at most 65,536."""
    positional: str = "sinusoidal"
    """"sinusoidal" (§3.5) or "learned" embeddings."""
    positional_layout: str = "interleaved"
    """Sinusoid columns: "interleaved" (§3.5: sin at even, cos at odd dimensions) or "halves"
    (sin in the first half, cos in the second: Marian, tensor2tensor)."""
    norm_first: bool = False
    """False: post-norm as in the paper; True: pre-norm."""
    layer_norm_eps: float = 1e-5
    """The ε of layer normalisation; above 0 and below 1."""
    share_embeddings: bool = False
    """One embedding table for source and target (needs data.joint_vocab: true)."""
    tie_output: bool = True
    """Output projection reuses the target embedding matrix (§3.4)."""
    output_bias: bool = False
    """A learned bias on the output logits (Marian's final_logits_bias)."""
    architecture: str = "transformer"
    """"transformer", or "rnn": the RNN encoder-decoder the Transformer replaced."""
    rnn_cell: str = "gru"
    """RNN: the recurrent cell, "gru" or "lstm"."""
    rnn_attention: str = "bahdanau"
    """RNN: "none" (one fixed context vector), "bahdanau" (additive) or "luong" (multiplicative)."""
    rnn_hidden: int = 512
    """RNN: hidden units per direction of the encoder, and of the decoder; at most 65,536."""
    rnn_layers: int = 1
    """RNN: stacked layers of the encoder and of the decoder; at most 1,000."""
    rnn_embedding: int = 512
    """RNN: width of the word embeddings and of the readout before the output layer; at most
    65,536."""
    rnn_dropout: float = 0.1
    """RNN: on embeddings, between stacked layers and on the readout."""

    def __post_init__(self) -> None:
        check_types(self)
        check_finite(self)
        check_sizes(self, SIZE_LIMITS)
        if self.d_model % self.n_heads:
            raise BadValue(
                f"ModelConfig.d_model ({self.d_model}) must be divisible by "
                f"ModelConfig.n_heads ({self.n_heads})"
            )
        check_probability(self, "dropout", "attention_dropout", "activation_dropout", "rnn_dropout")
        for name, allowed in (("architecture", ARCHITECTURES), ("rnn_cell", RNN_CELLS),
                              ("rnn_attention", RNN_ATTENTIONS)):  # fmt: skip
            if getattr(self, name) not in allowed:
                raise BadValue(
                    f"ModelConfig.{name} must be one of {allowed}, got {getattr(self, name)!r}"
                )
        if self.positional not in POSITIONAL_KINDS:
            raise BadValue(
                f"ModelConfig.positional must be one of {POSITIONAL_KINDS}, got {self.positional!r}"
            )
        for name, allowed in (("positional_layout", POSITIONAL_LAYOUTS),
                              ("activation", ACTIVATIONS)):  # fmt: skip
            if getattr(self, name) not in allowed:
                raise BadValue(
                    f"ModelConfig.{name} must be one of {allowed}, got {getattr(self, name)!r}"
                )
        if not 0 < self.layer_norm_eps < 1:  # from 1 on it outweighs the variance it steadies
            raise BadValue(
                f"ModelConfig.layer_norm_eps must be > 0 and < 1, got {self.layer_norm_eps!r}"
            )
        if self.share_embeddings and self.src_vocab_size != self.tgt_vocab_size:
            raise BadValue(
                "ModelConfig.share_embeddings needs src_vocab_size == tgt_vocab_size, got "
                f"{self.src_vocab_size} and {self.tgt_vocab_size}"
            )

    @property
    def d_head(self) -> int:
        return self.d_model // self.n_heads

    @property
    def vocab_sizes(self) -> tuple[int, int]:
        """(source, target) ids: the pieces its tokenizers must have (``Tokenizers.load``)."""
        return self.src_vocab_size, self.tgt_vocab_size

    def step_products(self) -> int:
        """Multiply-adds of one Transformer decoding step for one row: per decoder layer the
        self-attention's four projections (4·d²), the encoder-decoder attention's query and
        output (2·d²) and the feed-forward (2·d·d_ff); then the output layer (d·V). Left out:
        the source's keys and values, made once, and the attention's scores, which grow with
        the length."""
        d = self.d_model
        return self.n_decoder_layers * (6 * d * d + 2 * d * self.d_ff) + d * self.tgt_vocab_size

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
