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

import threading
from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import nn

from ..config import ModelConfig
from ..device import available_memory
from ..errors import BadValue, UserError
from .base import EncoderDecoder
from .rnn import RNNEncoderDecoder
from .transformer import Transformer


def build_model(config: ModelConfig, origin: str = "", initialise: bool = True) -> EncoderDecoder:
    """The network of ``config.architecture``, with fresh weights (train mode), once
    ``check_memory`` has let its sizes through (on the meta device too: ``transformer info``).

    Args:
        origin: where the config comes from (a file), named in the refusal.
        initialise: False for a checkpoint's weights to be read into (``load_checkpoint``):
            the weights are left as allocated, not drawn at random (``_not_drawn``).
    """
    check_memory(config, origin)
    if initialise:
        return _network(config)
    with _not_drawn():
        return _network(config)


# Every layer draws its first weights through these (nn.Linear, nn.Embedding, nn.GRU, ours).
_RANDOM_INITS = ("uniform_", "normal_", "kaiming_uniform_", "xavier_uniform_")
_INIT_LOCK = threading.RLock()  # held by one thread, which may nest them


@contextmanager
def _not_drawn() -> Iterator[None]:
    """``torch.nn.init``'s random initialisations do nothing while the network is built (one
    such build at a time; a thread drawing weights through ``torch.nn.init`` at that moment
    would not draw them either: the commands load their models before they start threads),
    so that the weights keep whatever their memory held, untouched: a checkpoint's weights
    replace every one (``load_weights``). At OPUS-MT's size ``load_checkpoint`` took 0.80-0.91
    s, 0.7-0.8 s of it drawing (``uniform_`` 530 ms, ``normal_`` 144 ms), and peaked at 407 MB;
    now 0.37-0.41 s and 295-297 MB, the weights' size. Building on the meta device instead
    took longer (its first use imports sympy: 1.1 s)."""
    with _INIT_LOCK:
        saved = {name: getattr(nn.init, name) for name in _RANDOM_INITS}
        try:
            for name in _RANDOM_INITS:
                setattr(nn.init, name, _unchanged)
            yield
        finally:
            for name, function in saved.items():
                setattr(nn.init, name, function)


def _unchanged(tensor: torch.Tensor, *args: object, **kwargs: object) -> torch.Tensor:
    return tensor


def shapes_only(config: ModelConfig, origin: str = "", fits: bool = True) -> EncoderDecoder:
    """The network of ``config`` on the meta device: its parameters' names and shapes, no
    memory and nothing drawn (``transformer info``, the checks of an import or an export).
    Drawing on the meta device imports torch's compiler (1.0-1.4 s), so nothing is drawn.

    Args:
        fits: refuse sizes whose weights would not fit in free memory, as ``build_model`` does
            (False: a model converted a tensor at a time, never held whole).
    """
    if fits:
        check_memory(config, origin)
    with torch.device("meta"), _not_drawn():
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
        return sum(p.numel() for p in shapes_only(config, fits=False).parameters())
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
