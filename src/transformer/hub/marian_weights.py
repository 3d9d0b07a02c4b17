"""Hugging Face Marian's weight names and ours, the vocabulary rows between them, and the
permutation that turns our interleaved sinusoids into Marian's halves.

    Hugging Face MarianMTModel               ours (Transformer)
    model.encoder.layers.i.                  encoder.layers.i.
        self_attn.q_proj, k_, v_, out_proj       self_attn.w_q, w_k, w_v, w_o
        self_attn_layer_norm (weight, bias)      norm1 (gamma, beta)
        fc1, fc2                                 feed_forward.linear1, linear2
        final_layer_norm                         norm2
    model.decoder.layers.i.                  decoder.layers.i.
        self_attn, self_attn_layer_norm          self_attn, norm1
        encoder_attn, encoder_attn_layer_norm    cross_attn, norm2
        fc1, fc2, final_layer_norm               feed_forward.linear1, linear2, norm3
    model.shared / model.encoder.embed_tokens src_embed.tokens.weight   (rows renumbered)
    model.shared / model.decoder.embed_tokens tgt_embed.tokens.weight   (rows renumbered)
    lm_head (when not tied)                  output.weight              (rows renumbered)
    final_logits_bias (1, V)                 output.bias (V,)           (rows renumbered)
    model.*.embed_positions (older files)    not stored: checked against our table

Both store a linear layer's weight as (out, in), so nothing is transposed. The rows of the
vocabulary tensors follow ``marian_vocab.py``.

A permutation of the residual stream's D coordinates, applied to every weight that reads or
writes it, gives the same function: layer norm is symmetric in its coordinates, and each
projection reads or writes the stream through its columns or rows. Marian's sinusoid table is
ours with its columns permuted (sines first, then cosines: ``sinusoidal_table``), so a model
with interleaved positions goes out with ``to_halves`` applied and computes what it did.

Shapes: D model width, V vocabulary.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ..config import ModelConfig
from .marian_vocab import Rows

LINEAR = {"weight": "weight", "bias": "bias"}
NORM = {"gamma": "weight", "beta": "bias"}
ATTENTION = {"w_q": "q_proj", "w_k": "k_proj", "w_v": "v_proj", "w_o": "out_proj"}
ENCODER_LAYER = {"norm1": "self_attn_layer_norm", "norm2": "final_layer_norm"}
DECODER_LAYER = {"norm1": "self_attn_layer_norm", "norm2": "encoder_attn_layer_norm",
                 "norm3": "final_layer_norm"}  # fmt: skip
FEED_FORWARD = {"feed_forward.linear1": "fc1", "feed_forward.linear2": "fc2"}
POSITIONS = ("model.encoder.embed_positions.weight", "model.decoder.embed_positions.weight")
BIAS = "final_logits_bias"
LM_HEAD = "lm_head.weight"


def layer_names(config: ModelConfig) -> dict[str, str]:
    """{our name: Hugging Face's name} of every weight inside the layers."""
    names: dict[str, str] = {}
    decoder_attentions = {"self_attn": "self_attn", "cross_attn": "encoder_attn"}
    stacks = (("encoder", config.n_encoder_layers, {"self_attn": "self_attn"}, ENCODER_LAYER),
              ("decoder", config.n_decoder_layers, decoder_attentions, DECODER_LAYER))  # fmt: skip
    for stack, n, attentions, norms in stacks:
        for i in range(n):
            ours, theirs = f"{stack}.layers.{i}", f"model.{stack}.layers.{i}"
            for attn, hf_attn in attentions.items():
                for w, hf_w in ATTENTION.items():
                    for p in LINEAR:
                        names[f"{ours}.{attn}.{w}.{p}"] = f"{theirs}.{hf_attn}.{hf_w}.{p}"
            for norm, hf_norm in norms.items():
                for p, hf_p in NORM.items():
                    names[f"{ours}.{norm}.{p}"] = f"{theirs}.{hf_norm}.{hf_p}"
            for linear, hf_linear in FEED_FORWARD.items():
                for p in LINEAR:
                    names[f"{ours}.{linear}.{p}"] = f"{theirs}.{hf_linear}.{p}"
    return names


def table_names(config: ModelConfig, present: set[str]) -> dict[str, str]:
    """{our name: Hugging Face's name} of the vocabulary tensors of a Marian file whose tensor
    names are ``present`` (newer files store a shared table once, as ``model.shared``; older
    ones under the encoder's and decoder's names too)."""

    def first(*candidates: str) -> str:
        return next((c for c in candidates if c in present), candidates[0])

    src = "model.encoder.embed_tokens.weight"
    tgt = "model.decoder.embed_tokens.weight"
    names = {"src_embed.tokens.weight": first("model.shared.weight", src) if
             config.share_embeddings else src}  # fmt: skip
    if not config.share_embeddings:
        names["tgt_embed.tokens.weight"] = tgt
    if not config.tie_output:
        names["output.weight"] = LM_HEAD
    names["output.bias"] = BIAS
    return names


def export_names(config: ModelConfig) -> dict[str, str]:
    """{our name: Hugging Face's name} of every weight, as ``save_pretrained`` names them."""
    names = layer_names(config)
    shared = "model.shared.weight" if config.share_embeddings else None
    names["src_embed.tokens.weight"] = shared or "model.encoder.embed_tokens.weight"
    if not config.share_embeddings:
        names["tgt_embed.tokens.weight"] = "model.decoder.embed_tokens.weight"
    if not config.tie_output:
        names["output.weight"] = LM_HEAD
    names["output.bias"] = BIAS
    return names


def take_rows(tensor: Tensor, rows: Rows, fill: float = 0.0) -> Tensor:
    """Row i of the result is ``tensor[rows[i]]``, or all ``fill`` where rows[i] is None.

    Shape:
        tensor (V, ...) -> (len(rows), ...).
    """
    index = torch.tensor([r if r is not None else 0 for r in rows], dtype=torch.long)
    out = tensor.index_select(0, index)  # (len(rows), ...)
    new = torch.tensor([r is None for r in rows])
    out[new] = fill
    return out


def halves_permutation(d_model: int) -> Tensor:
    """The columns of the interleaved table that make the halves one: even ones, then odd ones
    (``sinusoidal_table(P, D, "halves") == sinusoidal_table(P, D)[:, perm]``)."""
    return torch.cat([torch.arange(0, d_model, 2), torch.arange(1, d_model, 2)])


# Which axis of each weight is the residual stream: the columns of whatever reads it, the rows
# (or the only axis) of whatever writes it or acts on it coordinate by coordinate.
READS = ("tokens.weight", "output.weight", "w_q.weight", "w_k.weight", "w_v.weight",
         "linear1.weight")  # fmt: skip
WRITES = ("w_o.weight", "w_o.bias", "linear2.weight", "linear2.bias", ".gamma", ".beta")


def to_halves(name: str, tensor: Tensor, perm: Tensor) -> Tensor:
    """Our weight ``name`` with the residual stream's coordinates permuted by ``perm``."""
    if name.endswith(READS):
        return tensor[:, perm]  # (out, D) columns
    if name.endswith(WRITES):
        return tensor[perm]  # (D, in) rows, or (D,)
    return tensor  # biases of projections into the heads or the feed-forward, output.bias
