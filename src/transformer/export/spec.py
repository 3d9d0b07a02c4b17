"""Our Transformer as a CTranslate2 ``TransformerSpec``: each weight where CTranslate2 reads it.

CTranslate2 (Klein et al. 2020) runs the same architecture in C++ with int8 kernels. Its model
is declared through its Python spec API (``ctranslate2.specs``), which writes the binary; no
byte of the format is written here. How each part of ours maps:

    ours                                   CTranslate2 spec
    TokenEmbedding · √d_model              embeddings.weight, scale_embeddings = True (√depth)
    sinusoidal table / learned positions   position_encodings.encodings (our table, row = position,
                                           in either column layout)
    norm_first False / True                pre_norm False / True
    Encoder / Decoder final_norm           encoder / decoder .layer_norm (pre-norm only)
    self_attn w_q, w_k, w_v                self_attention.linear[0] (fused, rows q | k | v)
    cross_attn w_q; w_k, w_v               attention.linear[0]; attention.linear[1] (rows k | v)
    w_o                                    linear[-1]
    norm1 / norm2 / norm3 (gamma, beta)    self_attention / attention / ffn .layer_norm
    feed_forward linear1, linear2          ffn.linear_0, ffn.linear_1
    activation relu / gelu / silu, swish   Activation.RELU / GELU / SWISH
    output (tied or not), its bias         decoder.projection.weight, .bias (zeros without one)
    shared / tied tables                   the same array; CTranslate2 stores it once (aliases)
    layer_norm_eps                         config.layer_norm_epsilon
    PAD 0, UNK 1, <s> 2, </s> 3            the vocabularies, in id order: the pieces themselves
    alignments (inference/alignment.py)    alignment_layer = the last decoder layer,
                                           alignment_heads = n_heads (their mean)

In post-norm each sublayer's layer norm follows its residual addition (x = LN(x + F(x))) in
both; CTranslate2 has no final norm there, and neither do we. A torch ``nn.Linear`` weight is
(out, in), the layout CTranslate2 expects, so nothing is transposed.

Shapes: D model width, F feed-forward width, V vocabulary, P max positions.
"""

from __future__ import annotations

import dataclasses
from types import ModuleType
from typing import Any

import numpy as np
from torch import Tensor

from ..config import RNN_KEYS, ModelConfig
from ..errors import UserError
from ..model.attention import MultiHeadAttention
from ..model.build import require_transformer
from ..model.layers import FeedForward, LayerNorm
from ..model.transformer import Transformer

INSTALL_HINT = "pip install '.[ct2]' (or pip install 'ctranslate2>=4.0')"

# How each ModelConfig field reaches the spec. A field added to ModelConfig later must be added
# here with its mapping, or the export refuses models that set it away from its default.
CARRIED = {
    "src_vocab_size": "the source embedding and vocabulary",
    "tgt_vocab_size": "the target embedding, vocabulary and projection",
    "d_model": "the weight shapes; the embedding scale √d_model",
    "n_heads": "num_heads",
    "d_ff": "the feed-forward weight shapes",
    "n_encoder_layers": "the encoder layers",
    "n_decoder_layers": "the decoder layers",
    "max_positions": "the position table",
    "positional": "position_encodings",
    "positional_layout": "position_encodings (the table as it is)",
    "activation": "activation",
    "output_bias": "decoder.projection.bias",
    "norm_first": "pre_norm and the final norms",
    "layer_norm_eps": "layer_norm_epsilon",
    "share_embeddings": "one aliased table",
    "tie_output": "the projection weight",
    "dropout": "nothing (inference)",
    "attention_dropout": "nothing (inference)",
    "activation_dropout": "nothing (inference)",
    "architecture": "TransformerSpec itself (an RNN is refused first)",
    **{key: "nothing (only the RNN reads it)" for key in RNN_KEYS},
}
POSITIONAL = ("sinusoidal", "learned")  # both become an explicit table of encodings
# ctranslate2.specs.Activation's member for each of ours (its GELU is the exact erf form).
ACTIVATIONS = {"relu": "RELU", "gelu": "GELU", "silu": "SWISH", "swish": "SWISH"}


def import_ctranslate2() -> ModuleType:
    """The ``ctranslate2`` module, or a one-line UserError that says how to install it."""
    try:
        import ctranslate2
    except ImportError:
        raise UserError(
            f"the ctranslate2 engine needs the ctranslate2 package: {INSTALL_HINT}"
        ) from None
    return ctranslate2


def check_expressible(config: ModelConfig) -> None:
    """Raises a UserError naming the first feature of ``config`` that the spec cannot express."""
    require_transformer(config, "export to CTranslate2")
    defaults = ModelConfig()
    for field in dataclasses.fields(ModelConfig):
        value = getattr(config, field.name)
        if field.name not in CARRIED and value != getattr(defaults, field.name):
            raise UserError(
                f"cannot export to CTranslate2: ModelConfig.{field.name} = {value!r} has no "
                "equivalent in ctranslate2.specs.TransformerSpec"
            )
    if config.positional not in POSITIONAL:
        raise UserError(
            f"cannot export to CTranslate2: positional = {config.positional!r}; the spec holds "
            f"a table of absolute position encodings ({' or '.join(POSITIONAL)} positions)"
        )


def transformer_spec(model: Transformer, src_pieces: list[str], tgt_pieces: list[str]) -> Any:
    """A validated ``ctranslate2.specs.TransformerSpec`` holding ``model``'s weights.

    Args:
        model: the trained model (any device; weights are copied to the CPU as float32).
        src_pieces, tgt_pieces: the vocabularies, piece i = id i (SentencePiece order).
    """
    config = model.config
    check_expressible(config)
    specs = import_ctranslate2().specs
    spec = specs.TransformerSpec.from_config(
        (config.n_encoder_layers, config.n_decoder_layers),
        config.n_heads,
        pre_norm=config.norm_first,
        activation=getattr(specs.Activation, ACTIVATIONS[config.activation]),
        alignment_layer=model.alignment_layer,
        alignment_heads=config.n_heads,
    )
    spec.config.layer_norm_epsilon = config.layer_norm_eps
    _set_inputs(spec.encoder, spec.encoder.embeddings[0], model.src_embed, config)
    _set_inputs(spec.decoder, spec.decoder.embeddings, model.tgt_embed, config)
    if config.norm_first:
        _set_norm(spec.encoder.layer_norm, model.encoder.final_norm)
        _set_norm(spec.decoder.layer_norm, model.decoder.final_norm)
    for layer_spec, layer in zip(spec.encoder.layer, model.encoder.layers, strict=True):
        _set_attention(layer_spec.self_attention, layer.self_attn, self_attention=True)
        _set_norm(layer_spec.self_attention.layer_norm, layer.norm1)
        _set_feed_forward(layer_spec.ffn, layer.feed_forward, layer.norm2)
    for layer_spec, layer in zip(spec.decoder.layer, model.decoder.layers, strict=True):
        _set_attention(layer_spec.self_attention, layer.self_attn, self_attention=True)
        _set_norm(layer_spec.self_attention.layer_norm, layer.norm1)
        _set_attention(layer_spec.attention, layer.cross_attn, self_attention=False)
        _set_norm(layer_spec.attention.layer_norm, layer.norm2)
        _set_feed_forward(layer_spec.ffn, layer.feed_forward, layer.norm3)
    spec.decoder.projection.weight = _array(model.output.weight)  # (V, D)
    if model.output.bias is not None:
        spec.decoder.projection.bias = _array(model.output.bias)  # (V,)
    spec.register_source_vocabulary(src_pieces)
    spec.register_target_vocabulary(tgt_pieces)
    spec.validate()
    return spec


def _array(t: Tensor) -> np.ndarray:
    """A parameter as a float32 CPU array."""
    return t.detach().float().cpu().numpy()


def _set_inputs(stack: Any, embeddings: Any, ours: Any, config: ModelConfig) -> None:
    """Token table, the √d_model scale and the position table of one stack."""
    embeddings.weight = _array(ours.tokens.weight)  # (V, D)
    stack.scale_embeddings = True  # CTranslate2 multiplies by √depth = √d_model, as we do
    positions = ours.positions
    table = positions.table if config.positional == "sinusoidal" else positions.weight
    stack.position_encodings.encodings = _array(table)  # (P, D): row p is added at position p


def _set_norm(spec: Any, norm: LayerNorm) -> None:
    spec.gamma, spec.beta = _array(norm.gamma), _array(norm.beta)


def _set_linears(spec: Any, *linears: Any) -> None:
    """One (possibly fused) linear: weights stacked by output rows, (Σ out, in)."""
    spec.weight = np.concatenate([_array(linear.weight) for linear in linears])
    spec.bias = np.concatenate([_array(linear.bias) for linear in linears])


def _set_attention(spec: Any, attention: MultiHeadAttention, self_attention: bool) -> None:
    """Self-attention fuses Q, K, V into linear[0]; encoder-decoder attention keeps Q apart
    (its keys and values come from the encoder output) and fuses K, V into linear[1]."""
    if self_attention:
        _set_linears(spec.linear[0], attention.w_q, attention.w_k, attention.w_v)  # (3D, D)
    else:
        _set_linears(spec.linear[0], attention.w_q)  # (D, D)
        _set_linears(spec.linear[1], attention.w_k, attention.w_v)  # (2D, D)
    _set_linears(spec.linear[-1], attention.w_o)


def _set_feed_forward(spec: Any, feed_forward: FeedForward, norm: LayerNorm) -> None:
    _set_linears(spec.linear_0, feed_forward.linear1)  # (F, D)
    _set_linears(spec.linear_1, feed_forward.linear2)  # (D, F)
    _set_norm(spec.layer_norm, norm)
