"""Parameter counts per part of the model, in the notes' vocabulary (``transformer info``).

The model is built on PyTorch's meta device, which records shapes and allocates nothing; sizes
whose float32 weights would not fit in this machine's free memory are refused first, as in every
command that builds a model (``model/build.py``).
"""

from __future__ import annotations

import torch
from torch import nn

from ..config import ModelConfig
from ..model.build import Seq2Seq, build_model
from ..model.rnn import RNNEncoderDecoder


def _count(module: nn.Module, seen: set[int]) -> int:
    """Parameters of ``module`` not already counted (shared tables count once)."""
    total = 0
    for p in module.parameters():
        if id(p) not in seen:
            seen.add(id(p))
            total += p.numel()
    return total


def parameter_table(model: Seq2Seq) -> list[tuple[str, int]]:
    """(part, parameter count) rows in the order of Figure 1 (for the RNN: of its data flow);
    the last row is the total."""
    config: ModelConfig = model.config
    seen: set[int] = set()
    if isinstance(model, RNNEncoderDecoder):
        return _rnn_rows(model, seen)
    rows: list[tuple[str, int]] = []
    shared = " (shared with source)" if config.share_embeddings else ""
    rows.append(("source token embedding", _count(model.src_embed.tokens, seen)))
    rows.append((f"target token embedding{shared}", _count(model.tgt_embed.tokens, seen)))
    for side, embed in (("source", model.src_embed), ("target", model.tgt_embed)):
        rows.append(
            (f"{side} positional encoding ({config.positional})", _count(embed.positions, seen))
        )
    for i, layer in enumerate(model.encoder.layers, 1):
        rows.append((f"encoder {i} self-attention", _count(layer.self_attn, seen)))
        rows.append(
            (f"encoder {i} add & norm x2", _count(layer.norm1, seen) + _count(layer.norm2, seen))
        )
        rows.append((f"encoder {i} feed-forward", _count(layer.feed_forward, seen)))
    rows.append(("encoder final norm", _count(model.encoder.final_norm, seen)))
    for i, layer in enumerate(model.decoder.layers, 1):
        norms = _count(layer.norm1, seen) + _count(layer.norm2, seen) + _count(layer.norm3, seen)
        rows.append((f"decoder {i} masked self-attention", _count(layer.self_attn, seen)))
        rows.append((f"decoder {i} encoder-decoder attention", _count(layer.cross_attn, seen)))
        rows.append((f"decoder {i} add & norm x3", norms))
        rows.append((f"decoder {i} feed-forward", _count(layer.feed_forward, seen)))
    rows.append(("decoder final norm", _count(model.decoder.final_norm, seen)))
    tied = " (tied to target embedding)" if config.tie_output else ""
    rows.append((f"output linear{tied}", _count(model.output, seen)))
    rows.append(("total", sum(count for _, count in rows)))
    return rows


def _rnn_rows(model: RNNEncoderDecoder, seen: set[int]) -> list[tuple[str, int]]:
    """``parameter_table`` of the RNN encoder-decoder."""
    config, decoder = model.config, model.decoder
    shared = " (shared with source)" if config.share_embeddings else ""
    cell, attention = config.rnn_cell.upper(), config.rnn_attention
    rows = [
        ("source word embedding", _count(model.encoder.embedding, seen)),
        (f"target word embedding{shared}", _count(decoder.embedding, seen)),
        (f"encoder bidirectional {cell} x{config.rnn_layers}", _count(model.encoder.rnn, seen)),
        ("decoder initial state s_0 (W_s)", _count(decoder.bridge, seen)),
        (f"decoder {cell} x{config.rnn_layers}", _count(decoder.rnn, seen)),
        (f"attention ({attention})", _count(decoder.attention, seen) if decoder.attention else 0),
        ("readout", _count(decoder.readout, seen)),
    ]
    tied = " (tied to target embedding)" if config.tie_output else ""
    rows.append((f"output linear{tied}", _count(model.output, seen)))
    rows.append(("total", sum(count for _, count in rows)))
    return rows


def format_table(rows: list[tuple[str, int]], config: ModelConfig) -> str:
    """The table as text, with the config line on top."""
    vocab = f"vocab={config.src_vocab_size}/{config.tgt_vocab_size}"
    head = (
        f"d_model={config.d_model} heads={config.n_heads} d_ff={config.d_ff} "
        f"layers={config.n_encoder_layers}+{config.n_decoder_layers} {vocab} "
        f"{'post' if not config.norm_first else 'pre'}-norm"
    )
    if config.architecture == "rnn":
        head = (
            f"rnn cell={config.rnn_cell} attention={config.rnn_attention} "
            f"hidden={config.rnn_hidden} embedding={config.rnn_embedding} "
            f"layers={config.rnn_layers} {vocab}"
        )
    width = max(len(name) for name, _ in rows)
    lines = [head, ""]
    for name, count in rows:
        if name == "total":
            lines.append("-" * (width + 14))
        lines.append(f"{name:<{width}}  {count:>12,}")
    total = rows[-1][1]
    lines.append(f"{'':<{width}}  {total / 1e6:>11.2f}M")
    return "\n".join(lines)


def describe(config: ModelConfig) -> str:
    """The parameter table of a model built from ``config`` (``transformer info``), built on the
    meta device; sizes that would not fit in free memory are refused (``build_model``)."""
    with torch.device("meta"):  # shapes only: nothing is allocated
        model = build_model(config)
    return format_table(parameter_table(model), config)
