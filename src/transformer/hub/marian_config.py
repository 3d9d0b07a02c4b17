"""Marian's ``config.json`` and our ModelConfig: what maps onto what, and what is refused.

    Hugging Face MarianConfig                     ours (ModelConfig)
    d_model                                       d_model
    encoder_ / decoder_attention_heads (equal)    n_heads
    encoder_ / decoder_ffn_dim (equal)            d_ff
    encoder_layers, decoder_layers                n_encoder_layers, n_decoder_layers
    dropout, attention_dropout, activation_dropout  the same names
    activation_function relu / gelu / swish, silu activation relu / gelu / silu
    max_position_embeddings                       max_positions
    scale_embedding = true                        (always: embeddings · √d_model, §3.4)
    share_encoder_decoder_embeddings              share_embeddings
    tie_word_embeddings                           tie_output
    vocab_size, decoder_vocab_size                src_ / tgt_vocab_size, + 1 (marian_vocab.py)
    final_logits_bias (always there)              output_bias = true
    (always post-norm, LayerNorm ε 1e-5)          norm_first = false, layer_norm_eps = 1e-5
    (sinusoids, sin | cos halves)                 positional sinusoidal, positional_layout halves
    pad_token_id = decoder_start_token_id         BOS_ID's row; eos_token_id: EOS_ID's row

A key missing from ``config.json`` takes Hugging Face's default (``MarianConfig``), as
``from_pretrained`` does; keys Hugging Face's Marian ignores (``normalize_before`` and the like,
left in older files) are ignored here too. Each key read must have its type (``HF_TYPES``: an
activation given as a list is refused) and each size the range ModelConfig gives the field it
becomes (``SIZE_LIMITS``: 10^8 positions are refused before anything is built). What our model
cannot express is refused, naming the key and its value: different head counts or feed-forward
widths in encoder and decoder, another activation, unscaled embeddings, LayerDrop, a decoder
start token that is not the padding one.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ..config import ModelConfig
from ..config.model import SIZE_LIMITS
from ..errors import BadValue, UserError
from ..reading import in_range, typed

# MarianConfig's defaults (transformers 5, models/marian/configuration_marian.py).
HF_DEFAULTS: dict[str, object] = {
    "vocab_size": 58101, "decoder_vocab_size": None, "max_position_embeddings": 1024,
    "encoder_layers": 12, "encoder_ffn_dim": 4096, "encoder_attention_heads": 16,
    "decoder_layers": 12, "decoder_ffn_dim": 4096, "decoder_attention_heads": 16,
    "encoder_layerdrop": 0.0, "decoder_layerdrop": 0.0, "activation_function": "gelu",
    "d_model": 1024, "dropout": 0.1, "attention_dropout": 0.0, "activation_dropout": 0.0,
    "decoder_start_token_id": 58100, "scale_embedding": False, "pad_token_id": 58100,
    "eos_token_id": 0, "share_encoder_decoder_embeddings": True, "tie_word_embeddings": True,
}  # fmt: skip
HF_TYPES: dict[str, type | tuple] = {
    **{key: int for key in HF_DEFAULTS}, "decoder_vocab_size": (int, None),
    "encoder_layerdrop": float, "decoder_layerdrop": float, "activation_function": str,
    "dropout": float, "attention_dropout": float, "activation_dropout": float,
    "scale_embedding": bool, "share_encoder_decoder_embeddings": bool,
    "tie_word_embeddings": bool,
}  # fmt: skip
# The sizes, and the ModelConfig field whose range each must be in (a vocabulary gets one row more).
SIZES = {
    "vocab_size": "src_vocab_size", "decoder_vocab_size": "tgt_vocab_size", "d_model": "d_model",
    "encoder_attention_heads": "n_heads", "encoder_ffn_dim": "d_ff",
    "encoder_layers": "n_encoder_layers", "decoder_layers": "n_decoder_layers",
    "max_position_embeddings": "max_positions",
}  # fmt: skip
ACTIVATIONS = {"relu": "relu", "gelu": "gelu", "swish": "silu", "silu": "silu"}  # HF -> ours
HF_EPS = 1e-5  # nn.LayerNorm's default, which Hugging Face's Marian layers use

# How each ModelConfig field reaches Marian's config on export. A field added to ModelConfig
# later is refused unless it keeps its default, until it is added here with its mapping.
CARRIED = {
    "src_vocab_size": "vocab_size", "tgt_vocab_size": "decoder_vocab_size",
    "d_model": "d_model", "n_heads": "encoder_ / decoder_attention_heads",
    "d_ff": "encoder_ / decoder_ffn_dim", "n_encoder_layers": "encoder_layers",
    "n_decoder_layers": "decoder_layers", "dropout": "dropout",
    "attention_dropout": "attention_dropout", "activation_dropout": "activation_dropout",
    "activation": "activation_function", "max_positions": "max_position_embeddings",
    "positional_layout": "the weights (interleaved ones are permuted)",
    "share_embeddings": "share_encoder_decoder_embeddings", "tie_output": "tie_word_embeddings",
    "output_bias": "final_logits_bias (zeros without one)",
}  # fmt: skip
FIXED = {"positional": "sinusoidal", "norm_first": False, "layer_norm_eps": HF_EPS}
WHY = {
    "positional": "Marian's positions are fixed sinusoids",
    "norm_first": "Marian's layers are post-norm",
    "layer_norm_eps": f"Marian's layer norms use ε = {HF_EPS:g}",
}


@dataclass(frozen=True)
class MarianModel:
    """What an import needs from ``config.json``."""

    model: ModelConfig  # ours, vocabulary sizes with our padding row
    eos: int  # Marian's eos_token_id
    start: int  # Marian's decoder_start_token_id (= pad_token_id)
    src_vocab: int  # Marian's vocabulary sizes
    tgt_vocab: int


def model_config(values: dict, origin: str) -> MarianModel:
    """Our ModelConfig for a Marian ``config.json`` (already parsed), or a UserError naming the
    key and value that has no equivalent here."""
    if values.get("model_type") != "marian":
        kind = values.get("model_type")
        raise UserError(f"{origin}: unknown model_type {kind!r}; only Marian models (model_type "
                        "'marian', e.g. Helsinki-NLP/opus-mt-*) are imported")  # fmt: skip
    v = {key: typed(values, key, kind, origin, HF_DEFAULTS[key]) for key, kind in HF_TYPES.items()}
    for key, field in SIZES.items():
        if v[key] is not None:
            high = SIZE_LIMITS[field] - field.endswith("vocab_size")  # less our padding row
            in_range(v[key], 1, high, origin, key, f"the range of ModelConfig.{field}")
    for a, b in (("encoder_attention_heads", "decoder_attention_heads"),
                 ("encoder_ffn_dim", "decoder_ffn_dim")):  # fmt: skip
        if v[a] != v[b]:
            raise UserError(f"{origin}: {a} = {v[a]!r} and {b} = {v[b]!r} differ; our model "
                            "has one value for both stacks")  # fmt: skip
    refusals = {
        "activation_function": v["activation_function"] not in ACTIVATIONS,
        "scale_embedding": v["scale_embedding"] is not True,
        "encoder_layerdrop": v["encoder_layerdrop"] != 0,
        "decoder_layerdrop": v["decoder_layerdrop"] != 0,
        "decoder_start_token_id": v["decoder_start_token_id"] != v["pad_token_id"],
    }
    for key, refused in refusals.items():
        if refused:
            raise UserError(f"{origin}: {key} = {v[key]!r} cannot be expressed here ({_why(key)})")
    src_vocab = v["vocab_size"]
    shared = v["share_encoder_decoder_embeddings"]
    tgt_vocab = src_vocab if shared or v["decoder_vocab_size"] is None else v["decoder_vocab_size"]
    try:
        model = ModelConfig(
            src_vocab_size=src_vocab + 1, tgt_vocab_size=tgt_vocab + 1,
            d_model=v["d_model"], n_heads=v["encoder_attention_heads"], d_ff=v["encoder_ffn_dim"],
            n_encoder_layers=v["encoder_layers"], n_decoder_layers=v["decoder_layers"],
            dropout=v["dropout"], attention_dropout=v["attention_dropout"],
            activation_dropout=v["activation_dropout"],
            activation=ACTIVATIONS[v["activation_function"]],
            max_positions=v["max_position_embeddings"], positional="sinusoidal",
            positional_layout="halves", norm_first=False, layer_norm_eps=HF_EPS,
            share_embeddings=bool(shared), tie_output=bool(v["tie_word_embeddings"]),
            output_bias=True,
        )  # fmt: skip
    except BadValue as error:
        raise UserError(f"{origin}: {error}") from None
    return MarianModel(model, v["eos_token_id"], v["decoder_start_token_id"], src_vocab, tgt_vocab)


def _why(key: str) -> str:
    return {
        "activation_function": f"the feed-forward activation is one of {', '.join(ACTIVATIONS)}",
        "scale_embedding": "our embeddings are always scaled by √d_model, §3.4",
        "encoder_layerdrop": "LayerDrop is not implemented",
        "decoder_layerdrop": "LayerDrop is not implemented",
        "decoder_start_token_id": "the decoder must start from the padding token, as in Marian",
    }[key]


def check_exportable(model: ModelConfig) -> None:
    """A UserError naming the first field of ``model`` that Marian cannot express."""
    defaults = ModelConfig()
    for field in dataclasses.fields(ModelConfig):
        value = getattr(model, field.name)
        if field.name in FIXED and value != FIXED[field.name]:
            raise UserError(f"cannot export to the Hugging Face format: ModelConfig.{field.name} "
                            f"= {value!r} ({WHY[field.name]})")  # fmt: skip
        if field.name not in CARRIED | FIXED and value != getattr(defaults, field.name):
            raise UserError(f"cannot export to the Hugging Face format: ModelConfig.{field.name} "
                            f"= {value!r} has no equivalent in MarianConfig")  # fmt: skip


def marian_config(model: ModelConfig, vocab: int, decoder_vocab: int) -> dict[str, object]:
    """The ``config.json`` of ``model`` as a MarianMTModel with these vocabulary sizes (the
    padding row, our BOS's, is the last id of both: ``marian_vocab.py``)."""
    pad = vocab - 1
    return {
        "model_type": "marian", "architectures": ["MarianMTModel"],
        "vocab_size": vocab, "decoder_vocab_size": decoder_vocab,
        "d_model": model.d_model, "encoder_layers": model.n_encoder_layers,
        "decoder_layers": model.n_decoder_layers,
        "encoder_attention_heads": model.n_heads, "decoder_attention_heads": model.n_heads,
        "encoder_ffn_dim": model.d_ff, "decoder_ffn_dim": model.d_ff,
        "activation_function": {"silu": "swish", "swish": "swish"}.get(
            model.activation, model.activation),
        "dropout": model.dropout, "attention_dropout": model.attention_dropout,
        "activation_dropout": model.activation_dropout,
        "max_position_embeddings": model.max_positions, "scale_embedding": True,
        "share_encoder_decoder_embeddings": model.share_embeddings,
        "tie_word_embeddings": model.tie_output, "is_encoder_decoder": True,
        "pad_token_id": pad, "decoder_start_token_id": pad,
        "eos_token_id": 0, "forced_eos_token_id": 0, "dtype": "float32",
    }  # fmt: skip


def generation_config(pad: int, beam_size: int, max_length: int) -> dict[str, object]:
    """``generation_config.json``: start from and never produce the padding token, end with
    ``</s>`` (0), our default beam, and room for ``max_length`` tokens."""
    return {
        "decoder_start_token_id": pad, "pad_token_id": pad, "eos_token_id": 0,
        "forced_eos_token_id": 0, "bad_words_ids": [[pad]], "num_beams": beam_size,
        "max_length": max_length,
    }  # fmt: skip
