"""One sentence through the real model, with every intermediate the step-through view shows.

``trace_sentence`` translates the sentence with beam search, recording its tree
(``inference/beam_tree.py``), then runs the forward pass of ``transformer attention``
(``Transformer.attention_maps`` on the source and <s> + translation) with forward hooks on the
modules the notes draw: the token embedding (already scaled by √d_model), the positional
encoding, W_Q, W_K, W_V and W_O of every attention, every layer norm, the feed-forward net's
second linear layer (its input is the activation's output, whichever activation the model
uses) and the decoder stack. The attention weights are those ``attention_maps`` returns; the
scaled scores are the model's own ``attention_scores`` of the hooked queries and keys; the
next-token distribution is the model's final linear layer and ``probabilities`` of the hooked
decoder output. Nothing is recomputed by a second implementation, and
``tests/test_step_through.py`` checks that the numbers agree with each other and with the
model's own API.

Shapes: S source length, T decoder inputs (<s> + translation), H heads, Dh head width,
D model width, F feed-forward width, V target vocabulary, P positions plotted.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..config import DecodeConfig
from ..data.batching import encode_source
from ..errors import UserError
from ..inference.beam import beam_search
from ..inference.beam_tree import BeamTree
from ..inference.engine import TorchEngine
from ..inference.inputs import check_text, search_of
from ..inference.search import Hypothesis, Stopped, evaluating, max_output_lengths
from ..model.attention import MultiHeadAttention, attention_scores
from ..model.layers import LayerNorm
from ..model.masks import combined_mask, padding_mask
from ..model.transformer import Transformer
from ..vocab import BOS_ID

PLOTTED_POSITIONS = 64  # the positional-encoding plot's x axis, as far as the model allows


@dataclass
class AttentionTrace:
    """One multi-head attention of one layer (batch of one, so no B)."""

    q: Tensor  # (H, Tq, Dh) the queries, W_Q's output split into heads
    k: Tensor  # (H, Tk, Dh)
    v: Tensor  # (H, Tk, Dh)
    scores: Tensor  # (H, Tq, Tk) Q·Kᵀ
    scaled: Tensor  # (H, Tq, Tk) Q·Kᵀ/√d_k, -inf where the mask blocks a key
    weights: Tensor  # (H, Tq, Tk) softmax of ``scaled``, as attention_maps returns them
    heads: Tensor  # (Tq, D) every head's weighted sum of values, concatenated (W_O's input)
    output: Tensor  # (Tq, D) after W_O


@dataclass
class NormTrace:
    """One layer norm: its input h, ĥ = (h − μ)/√(σ² + ε) before γ and β, and y = γĥ + β."""

    input: Tensor  # (T, D)
    normalized: Tensor  # (T, D) ĥ
    output: Tensor  # (T, D) y, what the model passes on


@dataclass
class LayerTrace:
    """One encoder or decoder layer."""

    self_attention: AttentionTrace
    cross_attention: AttentionTrace | None  # decoder layers only
    norms: list[NormTrace]  # in the order the layer applies them
    hidden: Tensor  # (T, F) the feed-forward net's activations (its second linear's input)
    feed_forward: Tensor  # (T, D) the feed-forward net's output


@dataclass
class Stream:
    """The input of one stack: tokens, embeddings and positions."""

    ids: list[int]
    pieces: list[str]
    embedding: Tensor  # (L, D) token embeddings, already multiplied by √d_model
    position: Tensor  # (L, D) positional encodings
    input: Tensor  # (L, D) their sum, the stack's input X


@dataclass
class Trace:
    """Everything the step-through view shows of one sentence."""

    sentence: str
    translation: str
    source: Stream  # S tokens: pieces + </s>
    target: Stream  # T decoder inputs: <s> + translation
    positions: Tensor  # (P, D) the positional encodings of positions 0..P-1, for the plot
    encoder: list[LayerTrace]
    decoder: list[LayerTrace]
    final_norms: dict[str, NormTrace]  # pre-norm models: "encoder", "decoder"
    logits: Tensor  # (T, V) the final linear layer's output at every decoder step
    probabilities: Tensor  # (T, V) its softmax
    tree: BeamTree  # beam search, step by step (sentence 0)
    nbest: list[Hypothesis]  # what beam search returned, best first
    decode: DecodeConfig
    max_len: int  # the most tokens the search allowed before EOS
    target_piece: Callable[[int], str]  # a target id's SentencePiece piece


def check_sentence(sentence: str, ids: list[int], max_positions: int, doing: str = "step through"
                   ) -> None:  # fmt: skip
    """Refuses an empty sentence, or one with more tokens (pieces + </s>) than the model has
    positions, in one line that names the numbers (``doing``: what the command does with it)."""
    if not sentence.strip():
        raise UserError(f"the sentence to {doing} is empty")
    if len(ids) > max_positions:
        raise UserError(f"the sentence has {len(ids)} tokens (pieces + </s>) and the model takes "
                        f"at most {max_positions} (max_positions); shorten it")  # fmt: skip


def trace_sentence(
    engine: TorchEngine, sentence: str, decode: DecodeConfig | None = None,
    stopped: Stopped | None = None,
) -> Trace:  # fmt: skip
    """Translates ``sentence`` with beam search and records what the view shows.

    Args:
        engine: a torch engine (the model on its device, tokenizers, default search).
        decode: the search (default: the engine's); sampling is refused, beam 1 is greedy.
        stopped: ``stopped(0)``: nobody waits for the view any more (the search ends at its
            next step).
    """
    check_text(sentence, "sentence")
    if not isinstance(engine, TorchEngine):
        raise TypeError(f"the step-through view runs the torch engine's model "
                        f"(load_torch_engine); got {type(engine).__name__}")  # fmt: skip
    model, decode = engine.model, search_of(decode, engine.decode)
    if not isinstance(model, Transformer):
        raise UserError(f"the step-through view shows the Transformer; {engine.path} holds a "
                        f"{type(model).__name__}")  # fmt: skip
    if decode.sampling:
        raise UserError("the step-through view shows a beam search; leave out --decode.sampling")
    tokenizers = engine.tokenizers
    src_ids = encode_source(tokenizers.src.encode(sentence))
    check_sentence(sentence, src_ids, model.config.max_positions)
    device = next(model.parameters()).device
    src = torch.tensor([src_ids], device=device)  # (1, S)
    tree = BeamTree()
    with engine.precision(), evaluating(model):  # eval mode: no dropout in what is shown
        nbest = beam_search(model, src, decode, recorder=tree, stopped=stopped)[0]
        tgt_ids = [BOS_ID, *nbest[0].tokens]
        tgt = torch.tensor([tgt_ids], device=device)  # (1, T)
        with _recording(_watched(model)) as calls:
            maps = model.attention_maps(src, tgt)
        hidden = calls[model.decoder][0][1][0]  # (1, T, D): the decoder stack's output
        logits = model.output(hidden)[0].float()  # (T, V)
        table = model.src_embed.positions(min(PLOTTED_POSITIONS, model.config.max_positions))
    src_mask, tgt_mask = padding_mask(src)[0], combined_mask(tgt)[0]  # (1, 1, S), (1, T, T)
    encoder = [
        _layer(calls, layer, weights[0], src_mask, None)
        for layer, weights in zip(model.encoder.layers, maps.encoder, strict=True)
    ]
    decoder = [_layer(calls, layer, w.self_attention[0], tgt_mask, (w.cross_attention[0], src_mask))
               for layer, w in zip(model.decoder.layers, maps.decoder, strict=True)]  # fmt: skip
    final_norms = {name: _norm(calls, stack.final_norm)
                   for name, stack in (("encoder", model.encoder), ("decoder", model.decoder))
                   if isinstance(stack.final_norm, LayerNorm)}  # fmt: skip
    return Trace(
        sentence=sentence, translation=tokenizers.tgt.decode(nbest[0].tokens),
        source=_stream(calls, model.src_embed, 0, src_ids, tokenizers.src.id_to_piece),
        target=_stream(calls, model.tgt_embed, -1, tgt_ids, tokenizers.tgt.id_to_piece),
        positions=table.float(), encoder=encoder, decoder=decoder, final_norms=final_norms,
        logits=logits, probabilities=model.probabilities(logits), tree=tree, nbest=nbest,
        decode=decode, target_piece=tokenizers.tgt.id_to_piece,
        max_len=int(max_output_lengths(model, src, decode.max_len_a, decode.max_len_b)[0]),
    )  # fmt: skip


Calls = dict[nn.Module, list[tuple[tuple, object]]]  # module -> [(inputs, output) per call]


@contextmanager
def _recording(modules: Iterable[nn.Module]) -> Iterator[Calls]:
    """Forward hooks that keep every call's inputs and output; removed on the way out."""
    calls: Calls = {module: [] for module in modules}

    def keep(module: nn.Module, inputs: tuple, output: object) -> None:
        calls[module].append((inputs, output))

    handles = [module.register_forward_hook(keep) for module in calls]
    try:
        yield calls
    finally:
        for handle in handles:
            handle.remove()


def _watched(model: Transformer) -> list[nn.Module]:
    """The modules whose inputs and outputs the view shows (each once, shared ones too)."""
    modules: list[nn.Module] = [model.decoder]
    for embed in (model.src_embed, model.tgt_embed):
        modules += [embed, embed.tokens, embed.positions]
    for layer in [*model.encoder.layers, *model.decoder.layers]:
        for child in layer.children():
            if isinstance(child, MultiHeadAttention):
                modules += [child.w_q, child.w_k, child.w_v, child.w_o]
            elif isinstance(child, LayerNorm):
                modules.append(child)
        modules += [layer.feed_forward, layer.feed_forward.linear2]
    modules += [model.encoder.final_norm, model.decoder.final_norm]
    return list(dict.fromkeys(modules))  # a shared embedding table is watched once


def _output(calls: Calls, module: nn.Module, call: int = 0) -> Tensor:
    """A watched module's output, batch row 0, in float32."""
    return calls[module][call][1][0].float()


def _input(calls: Calls, module: nn.Module) -> Tensor:
    """A watched module's first input, batch row 0, in float32."""
    return calls[module][0][0][0][0].float()


def _stream(calls: Calls, embed: nn.Module, call: int, ids: list[int], piece) -> Stream:
    """Embeddings of one stack; ``call`` picks the source's (0) or the target's (-1) call of a
    token table that both share."""
    position = calls[embed.positions][0][1].float()  # (L, D): one table for the whole batch
    return Stream(ids, [piece(i) for i in ids], _output(calls, embed.tokens, call), position,
                  _output(calls, embed))  # fmt: skip


def _attention(
    calls: Calls, mha: MultiHeadAttention, weights: Tensor, mask: Tensor
) -> AttentionTrace:
    """Q, K, V from the hooked projections, split into heads the model's own way, so that head
    h here is head h in the weights."""
    q, k, v = (mha._split_heads(calls[w][0][1]).float()[0] for w in (mha.w_q, mha.w_k, mha.w_v))
    scaled = attention_scores(q, k).masked_fill(~mask, float("-inf"))  # (H, Tq, Tk)
    return AttentionTrace(q, k, v, q @ k.transpose(-2, -1), scaled, weights.float(),
                          _input(calls, mha.w_o), _output(calls, mha.w_o))  # fmt: skip


def _norm(calls: Calls, norm: LayerNorm) -> NormTrace:
    """The norm's input and output, and ĥ: the same kernel without γ and β."""
    h = _input(calls, norm)  # (T, D)
    normalized = F.layer_norm(h, h.shape[-1:], eps=norm.eps)  # (T, D) ĥ
    return NormTrace(h, normalized, _output(calls, norm))


def _layer(
    calls: Calls,
    layer: nn.Module,
    self_weights: Tensor,
    self_mask: Tensor,
    cross: tuple[Tensor, Tensor] | None,
) -> LayerTrace:
    """One layer's trace; ``cross``: the encoder-decoder weights and mask of a decoder layer."""
    norms = [_norm(calls, child) for child in layer.children() if isinstance(child, LayerNorm)]
    cross_attention = _attention(calls, layer.cross_attn, *cross) if cross else None
    return LayerTrace(
        _attention(calls, layer.self_attn, self_weights, self_mask), cross_attention, norms,
        _input(calls, layer.feed_forward.linear2), _output(calls, layer.feed_forward),
    )  # fmt: skip
