"""One place that builds the network a ModelConfig describes (the Annotated Transformer's
``make_model``): the Transformer, or the RNN encoder-decoder it replaced.

Both are an ``EncoderDecoder`` (base.py), so training, search, evaluation and inspection take
either. What only the Transformer can do (export to CTranslate2) asks ``require_transformer``
first.

Every command that builds a model (train, translate, evaluate, serve, explain, average, export,
import, info) builds it here, and here sizes whose float32 weights and position tables would not
fit in this machine's free memory are refused first, from a count computed from the sizes alone
(``parameter_count``): building that many modules would take long, then fail or be killed.
"""

from __future__ import annotations

import torch

from ..config import ModelConfig
from ..device import available_memory
from ..errors import BadValue, UserError
from .base import EncoderDecoder
from .rnn import RNNEncoderDecoder
from .transformer import Transformer


def build_model(config: ModelConfig, origin: str = "") -> EncoderDecoder:
    """The network of ``config.architecture``, with fresh weights (train mode), once
    ``check_memory`` has let its sizes through (on the meta device too: ``transformer info``).

    Args:
        origin: where the config comes from (a file), named in the refusal.
    """
    check_memory(config, origin)
    return _network(config)


def _network(config: ModelConfig) -> EncoderDecoder:
    return RNNEncoderDecoder(config) if config.architecture == "rnn" else Transformer(config)


def check_memory(config: ModelConfig, origin: str = "") -> None:
    """A one-line BadValue when the float32 weights and position tables of ``config`` exceed
    the memory free on this machine (nothing is checked where that is unknown)."""
    count, free = parameter_count(config), available_memory()
    tables = 0  # the fixed sinusoids: a (max_positions, d_model) buffer in each embedding
    if config.architecture == "transformer" and config.positional == "sinusoidal":
        tables = 2 * config.max_positions * config.d_model
    if free is not None and 4 * (count + tables) > free:
        where, also = f"{origin}: " if origin else "", " and position tables" if tables else ""
        raise BadValue(
            f"{where}these sizes give {count:,} parameters, {4 * (count + tables) / 1e9:,.1f} GB "
            f"of float32 weights{also}, more than the {free / 1e9:.1f} GB of memory free on this "
            "machine"
        )


def parameter_count(config: ModelConfig) -> int:
    """The parameters of a model built from ``config``, from its sizes alone (nothing is built;
    an RNN, whose stacked layers are one module each, is counted on the meta device).

    Per layer (§3): attention 4 projections D x D with biases; feed-forward D x F + F x D with
    biases; add & norm γ and β of width D (2 per encoder layer, 3 per decoder layer, and a final
    one after each stack when pre-norm).
    """
    if config.architecture == "rnn":
        with torch.device("meta"):
            return sum(p.numel() for p in _network(config).parameters())
    d, f = config.d_model, config.d_ff
    attention, feed_forward, norm = 4 * (d * d + d), 2 * d * f + f + d, 2 * d
    final = norm if config.norm_first else 0
    encoder = config.n_encoder_layers * (attention + feed_forward + 2 * norm) + final
    decoder = config.n_decoder_layers * (2 * attention + feed_forward + 3 * norm) + final
    tables = config.src_vocab_size + (0 if config.share_embeddings else config.tgt_vocab_size)
    positions = 2 * config.max_positions if config.positional == "learned" else 0
    output = 0 if config.tie_output else config.tgt_vocab_size
    bias = config.tgt_vocab_size if config.output_bias else 0  # Marian's final_logits_bias
    return (tables + positions + output) * d + bias + encoder + decoder


def require_transformer(config: ModelConfig, what: str) -> None:
    """A one-line UserError unless ``config`` describes a Transformer.

    Args:
        what: what was asked for, e.g. "export to CTranslate2".
    """
    if config.architecture != "transformer":
        raise UserError(
            f"cannot {what}: the model's architecture is {config.architecture!r} "
            f"(model.architecture); only a Transformer can"
        )
