"""What every model answers: the encoder-decoder interface (the Annotated Transformer's
``EncoderDecoder``), which the Transformer and the RNN encoder-decoder it replaced implement.

    source ids ──► encode ──► memory, source mask ──┐
    target ids ──────────────► decode_hidden (+ cache) ──► output (final linear) ──► logits

The searches (``inference/``), the training loss and the inspection call only what is here:
``encode`` once per source, then ``decode`` step by step with the state ``new_cache`` makes,
``log_probs`` of the logits; ``hidden_states`` for a fused loss; ``attention_maps`` for the
figures. What differs between the architectures and matters to the code around the model is a
property here (``width``, ``alignment_layer``, ``attention_kinds``, ...), never a test of
``config.architecture`` elsewhere.

Shapes: B batch, S source length, T target length, D the width ``output`` reads, V target
vocabulary.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Protocol

import torch
from torch import Tensor, nn

from ..config import ModelConfig
from .decoder import DecoderAttention

# The attention a model can draw, by kind; ``inspect/visualize.py`` names its figures so.
ATTENTION_KINDS = ("encoder_self", "decoder_self", "cross")


@dataclass
class AttentionMaps:
    """Every attention weight of one forward pass, layer by layer."""

    encoder: list[Tensor]  # N x (B, H, S, S); none for an RNN
    decoder: list[DecoderAttention]  # N x (self (B, H, T, T) or None, cross (B, H, T, S))


class Cache(Protocol):
    """What a search does with the decoder's state between steps (``DecoderCache``,
    ``RNNState``)."""

    def reorder(self, index: Tensor) -> None:
        """Row i continues row ``index[i]`` of the same sentence (beam search)."""

    def keep(self, index: Tensor, sentences: Tensor) -> None:
        """Only rows ``index`` stay (the other sentences have finished); what is kept per
        source moves by ``sentences`` (one per row, or one per sentence where the model's
        ``beams_share_memory``)."""


def check_token_ids(
    ids: Tensor, name: str, memory: Tensor | None = None, beams: bool = False,
    vocab_size: int = 0,
) -> None:  # fmt: skip
    """``ids`` is a (B, T) tensor of integer token ids; with ``memory`` (the encoder output),
    B is its number of sentences, or with ``beams`` a whole number of rows per sentence (a beam
    search's K); with ``vocab_size``, on a CPU, every id is below it. A 1-D sentence, a float
    tensor, a batch that did not match or an id past the vocabulary otherwise stopped deep
    inside ("too many indices", "Expected ... Long, Int", a ZeroDivisionError, "index out of
    range in self")."""
    if not isinstance(ids, Tensor) or ids.dim() != 2 or ids.is_floating_point() or ids.is_complex():
        got = (f"shape {tuple(ids.shape)}, {str(ids.dtype).removeprefix('torch.')}"
               if isinstance(ids, Tensor) else type(ids).__name__)  # fmt: skip
        one = isinstance(ids, Tensor) and ids.dim() == 1
        hint = ": a single sentence is ids[None]" if one else ""
        raise ValueError(f"{name} must be token ids of shape (B, T), integers (torch.long); got "
                         f"{got}{hint}")  # fmt: skip
    # the ids are read only where that is free: not on a GPU, which it would wait for, nor in
    # a graph torch.compile traces, which it would break
    readable = ids.device.type == "cpu" and not torch.compiler.is_compiling()
    if vocab_size and readable and ids.numel():
        low, high = (int(v) for v in torch.aminmax(ids))
        if low < 0 or high >= vocab_size:
            raise ValueError(f"{name} holds the id {low if low < 0 else high}, outside the "
                             f"vocabulary (0 to {vocab_size - 1})")  # fmt: skip
    if memory is None:
        return
    rows, sentences = ids.size(0), memory.size(0)
    fits = rows % sentences == 0 if beams and sentences else rows == sentences
    if not fits:
        per = "one row per sentence" + (" (or K per sentence: a beam search's beams)" * beams)
        raise ValueError(f"{name} has {rows} rows for {sentences} sentences of the encoder's "
                         f"output; give {per}")  # fmt: skip


class EncoderDecoder(nn.Module, ABC):
    """An encoder-decoder translation model: built from a ``ModelConfig``, ending in ``output``,
    the final linear layer (one logit per target-vocabulary word)."""

    config: ModelConfig
    output: nn.Linear

    @abstractmethod
    def encode(self, src_ids: Tensor) -> tuple[Tensor, Tensor]:
        """Runs the encoder.

        Args:
            src_ids: source token ids (B, S), padded with PAD_ID.
        Shape:
            returns the memory the decoder attends to (B, S, ·) and the source padding mask
            (B, 1, 1, S).
        """

    @abstractmethod
    def decode_hidden(
        self, tgt_ids: Tensor, memory: Tensor, src_mask: Tensor, cache: Cache | None = None
    ) -> Tensor:
        """Runs the decoder up to the final linear layer.

        Args:
            tgt_ids: decoder input ids (B, T), starting with BOS. With a cache: only the new
                positions, which must not be padding (generation never pads).
            memory, src_mask: from ``encode``.
            cache: the state of earlier steps (``new_cache``); updated in place.
        Shape:
            returns what ``output`` reads (B, T, D).
        """

    @abstractmethod
    def decode_aligned(
        self, tgt_ids: Tensor, memory: Tensor, src_mask: Tensor, cache: Cache | None = None
    ) -> tuple[Tensor, Tensor]:
        """``decode_hidden``, and where each position read the source: the encoder-decoder
        attention of ``alignment_layer``, averaged over its heads, in float32 (what a search
        keeps for word alignments: ``inference/alignment.py``).

        Shape:
            returns (B, T, D) and (B, T, S).
        """

    @abstractmethod
    def new_cache(self, length: int = 0) -> Cache:
        """An empty decoder state for incremental decoding of up to ``length`` target positions
        (0: not known; a state that keeps one entry per position then grows as needed)."""

    @abstractmethod
    def attention_maps(self, src_ids: Tensor, tgt_ids: Tensor) -> AttentionMaps:
        """Every attention weight for a source and a (forced) target, of the kinds
        ``attention_kinds`` names; a one-line UserError when there are none."""

    @abstractmethod
    def parts(self) -> list[tuple[str, list[nn.Module]]]:
        """(part, its modules) in the order of the data flow, in the notes' words: what
        ``transformer info`` counts the parameters of."""

    @abstractmethod
    def once_per_batch(self) -> list[nn.Module]:
        """The modules a search runs once per batch of sources, not at every step: the encoder,
        and what the decoder computes from the encoder's output alone. Their products take a
        whole batch's source words at once (hundreds of rows), a step's a few rows per
        sentence, and ``model/linear.py`` packs the two kinds by different rules."""

    @property
    @abstractmethod
    def width(self) -> int:
        """The model's width: what the learning-rate schedule scales by and what decides
        whether bfloat16 pays (``device.resolve_precision``)."""

    @property
    @abstractmethod
    def alignment_layer(self) -> int:
        """The decoder layer of ``attention_maps`` whose encoder-decoder attention, averaged
        over its heads, gives word alignments (``inference/alignment.py``)."""

    @property
    @abstractmethod
    def attention_kinds(self) -> tuple[str, ...]:
        """The kinds of ``ATTENTION_KINDS`` that ``attention_maps`` holds; () for none."""

    @property
    @abstractmethod
    def encodes_positions(self) -> bool:
        """Whether word order enters through positional encodings added to the embeddings
        (§3.5) rather than through a recurrence."""

    # Whether ``decode`` takes an encoder output with one row per sentence for a decoder input
    # with K rows per sentence (beam search's beams, rows n·K..n·K+K-1 of sentence n), so that
    # a search need not copy the encoder output and its cached keys and values K times.
    beams_share_memory: bool = False

    @property
    @abstractmethod
    def name(self) -> str:
        """A short name, e.g. "GRU, no attention", "Transformer (d 128, 3+3)"."""

    @property
    @abstractmethod
    def summary(self) -> str:
        """The sizes and switches that make this model, in one line."""

    def decode(
        self, tgt_ids: Tensor, memory: Tensor, src_mask: Tensor, cache: Cache | None = None
    ) -> Tensor:
        """Runs the decoder and the final linear layer (arguments as ``decode_hidden``).

        Shape:
            returns logits (B, T, V).
        """
        return self.output(self.decode_hidden(tgt_ids, memory, src_mask, cache))  # (B, T, V)

    def forward(self, src_ids: Tensor, tgt_ids: Tensor) -> Tensor:
        """Teacher forcing: logits for every target position at once.

        Args:
            src_ids: (B, S); tgt_ids: decoder input (B, T) = <s> y1 .. y_{T-1}.
        Shape:
            returns logits (B, T, V); position t scores the word that follows tgt_ids[:, :t+1].
        """
        memory, src_mask = self.encode(src_ids)
        return self.decode(tgt_ids, memory, src_mask)

    def hidden_states(self, src_ids: Tensor, tgt_ids: Tensor) -> Tensor:
        """Teacher forcing up to the final linear layer, which a fused loss applies itself
        (training/chunked_loss.py): ``forward`` is ``self.output(hidden_states(...))``.

        Shape:
            src_ids (B, S), tgt_ids (B, T) -> (B, T, D).
        """
        memory, src_mask = self.encode(src_ids)
        return self.decode_hidden(tgt_ids, memory, src_mask)

    def log_probs(self, logits: Tensor) -> Tensor:
        """log softmax over the vocabulary: (..., V) -> (..., V)."""
        return torch.log_softmax(logits.float(), dim=-1)

    def probabilities(self, logits: Tensor) -> Tensor:
        """The final softmax: a distribution over the target vocabulary, (..., V) -> (..., V)."""
        return torch.softmax(logits.float(), dim=-1)

    def _init_linear_weights(self) -> None:
        """Xavier-uniform weights, zero biases for every linear layer (as torch.nn.Transformer)."""
        for module in self.modules():
            if isinstance(module, nn.Linear):
                nn.init.xavier_uniform_(module.weight)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
