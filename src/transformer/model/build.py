"""One place that builds the network a ModelConfig describes (the Annotated Transformer's
``make_model``): the Transformer, or the RNN encoder-decoder it replaced.

Both answer the same calls (``encode``, ``decode``, ``new_cache``, ``log_probs``,
``attention_maps``), so training, search, evaluation and inspection take either. What only the
Transformer can do (export to CTranslate2) asks ``require_transformer`` first.
"""

from __future__ import annotations

from ..config import ModelConfig
from ..errors import UserError
from .rnn import RNNEncoderDecoder
from .transformer import Transformer

Seq2Seq = Transformer | RNNEncoderDecoder  # what build_model returns


def build_model(config: ModelConfig) -> Seq2Seq:
    """The network of ``config.architecture``, with fresh weights (train mode)."""
    if config.architecture == "rnn":
        return RNNEncoderDecoder(config)
    return Transformer(config)


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
