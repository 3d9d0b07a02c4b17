"""The step-through view's data: a ``Trace`` as the JSON object the page draws.

A matrix travels as ``{"shape": [...], "full": [...], "data": base64}``: its values as
little-endian float32 (exactly the model's float32 numbers; -inf where a mask blocks a key),
``shape`` what is embedded and ``full`` the model's size before truncation. Wide matrices are
cut to their first columns (``Caps``) so that the file stays small; the page says which were
cut, and every mean, standard deviation and count is taken over the full width first. If the
data is larger than ``MAX_BYTES``, the caps are halved until it fits. The attention scores are
never cut (T² per head and layer): a sentence whose scores alone would not fit is refused, by
``check_fits`` before its search where its shortest output (``min_len``) is already too long,
and after it, before any of the view is built, where its output is.

Shapes: S source length, T decoder inputs, H heads, Dh head width, D model width, F
feed-forward width, V target vocabulary, P positions plotted, C plotted dimensions.
"""

from __future__ import annotations

import base64
import json
from dataclasses import asdict, dataclass

import torch
from torch import Tensor

from ..errors import UserError
from ..inference.beam_tree import FINISHED
from ..vocab import EOS_ID
from .trace import AttentionTrace, LayerTrace, NormTrace, Stream, Trace

FORMAT = 1  # the data's version, for the page
MAX_BYTES = 8_000_000  # the embedded data; the page's code and style add about 50 kB
TOP = 10  # next tokens shown per decoder step


@dataclass(frozen=True)
class Caps:
    """How many columns of each kind of matrix are embedded."""

    head: int = 64  # of a head's queries, keys and values (d_k)
    width: int = 256  # of a d_model-wide vector
    hidden: int = 512  # of the feed-forward net's units (d_ff)

    def halved(self) -> Caps:
        return Caps(max(self.head // 2, 8), max(self.width // 2, 16), max(self.hidden // 2, 16))


def step_view(trace: Trace, model_facts: dict, caps: Caps = Caps()) -> dict:  # noqa: B008
    """The page's data for ``trace``, within ``MAX_BYTES`` (caps halved until it fits).

    Args:
        trace: from ``trace_sentence``.
        model_facts: the model's config as a dict, and its parameter count under "parameters".
    """
    S, T = len(trace.source.ids), len(trace.target.ids)
    check_fits(S, T - 1, model_facts)
    while True:
        view = _view(trace, model_facts, caps)
        size = len(json.dumps(view))
        if size <= MAX_BYTES:
            return view
        if caps == caps.halved():  # the rest of the view, with the scores
            raise _too_large(S, f"{T - 1}", size)
        caps = caps.halved()


def check_fits(S: int, out: int, model_facts: dict, least: bool = False) -> None:
    """Refuses the view of a sentence of ``S`` tokens (pieces + </s>) and ``out`` output tokens
    (with ``least``, at least that many) whose attention scores alone are over ``MAX_BYTES``."""
    size = scores_bytes(S, out + 1, model_facts)  # the decoder reads <s> + the output
    if size > MAX_BYTES:
        raise _too_large(S, f"at least {out}" if least else f"{out}", size, least)


def scores_bytes(S: int, T: int, model_facts: dict) -> int:
    """What the view's attention scores take, at any caps: in every attention, the scores, the
    scaled scores and the weights, (H, Tq, Tk) float32 each, in base64."""
    heads = model_facts["n_heads"]

    def three(q: int, k: int) -> int:
        return 3 * 4 * -(-(4 * heads * q * k) // 3)  # base64: 4 characters per 3 bytes

    encoder, decoder = model_facts["n_encoder_layers"], model_facts["n_decoder_layers"]
    return encoder * three(S, S) + decoder * (three(T, T) + three(T, S))


def _too_large(S: int, out: str, size: int, least: bool = False) -> UserError:
    at = "at least " if least else ""
    return UserError(f"the step-through view of this sentence ({S} tokens in, {out} out) would "
                     f"take {at}{size / 1e6:.1f} MB, over the {MAX_BYTES / 1e6:g} MB it may; try "
                     "a shorter sentence, or a lower min_len or max_len_b")  # fmt: skip


def matrix(x: Tensor, columns: int | None = None) -> dict:
    """A tensor as the page reads it: its first ``columns`` columns, float32, base64."""
    full = list(x.shape)
    if columns is not None:
        x = x[..., :columns]
    data = x.detach().float().cpu().contiguous().numpy().astype("<f4").tobytes()
    return {"shape": list(x.shape), "full": full, "data": base64.b64encode(data).decode("ascii")}


def _stats(*rows: Tensor) -> dict:
    """Per token: the mean and population standard deviation (divide by D, as the notes do)
    of each (T, D) matrix, over all D columns: (2·len(rows), T)."""
    found = []
    for x in rows:
        found += [x.mean(dim=-1), x.var(dim=-1, unbiased=False).sqrt()]
    return matrix(torch.stack(found))


def _view(trace: Trace, model_facts: dict, caps: Caps) -> dict:
    """The data at these caps."""
    width, head, hidden = caps.width, caps.head, caps.hidden
    d_model, d_head, d_ff = (model_facts[k] for k in ("d_model", "d_head", "d_ff"))
    truncated = []
    if d_head > head:
        truncated.append(f"Q, K and V: the first {head} of each head's {d_head} columns")
    if d_model > width:
        truncated.append(f"vectors of width d_model: the first {width} of {d_model} columns "
                         f"(means and standard deviations use all {d_model})")  # fmt: skip
    if d_ff > hidden:
        truncated.append(f"feed-forward units: the first {hidden} of {d_ff} (the count of "
                         f"active units uses all {d_ff})")  # fmt: skip

    def stream(s: Stream) -> dict:
        return {"pieces": s.pieces, "ids": s.ids, "embedding": matrix(s.embedding, width),
                "position": matrix(s.position, width), "input": matrix(s.input, width),
                "stats": _stats(s.embedding, s.position, s.input)}  # fmt: skip

    def attention(a: AttentionTrace) -> dict:
        H, Tq, Dh = a.q.shape
        per_head = a.heads.view(Tq, H, Dh).transpose(0, 1)  # (H, Tq, Dh): concat, undone
        return {"q": matrix(a.q, head), "k": matrix(a.k, head), "v": matrix(a.v, head),
                "scores": matrix(a.scores), "scaled": matrix(a.scaled),
                "weights": matrix(a.weights), "heads": matrix(per_head, head),
                "output": matrix(a.output, width)}  # fmt: skip

    def norm(n: NormTrace) -> dict:
        return {"input": matrix(n.input, width), "normalized": matrix(n.normalized, width),
                "output": matrix(n.output, width),
                "stats": _stats(n.input, n.normalized, n.output)}  # fmt: skip

    def layer(x: LayerTrace) -> dict:
        found = {"self": attention(x.self_attention), "norms": [norm(n) for n in x.norms],
                 "hidden": matrix(x.hidden, hidden), "active": (x.hidden > 0).sum(-1).tolist(),
                 "ffn": matrix(x.feed_forward, width)}  # fmt: skip
        if x.cross_attention is not None:
            found["cross"] = attention(x.cross_attention)
        return found

    dims = _plotted_dimensions(trace.positions.size(1))
    return {
        "format": FORMAT, "sentence": trace.sentence, "translation": trace.translation,
        "model": model_facts, "decode": asdict(trace.decode), "caps": asdict(caps),
        "truncated": truncated, "source": stream(trace.source), "target": stream(trace.target),
        "positions": {"dims": dims, "table": matrix(trace.positions[:, dims])},  # (P, C)
        "encoder": [layer(x) for x in trace.encoder],
        "decoder": [layer(x) for x in trace.decoder],
        "final_norms": {name: norm(n) for name, n in trace.final_norms.items()},
        "next": _next_tokens(trace), "beam": _beam(trace),
    }  # fmt: skip


def _plotted_dimensions(d_model: int) -> list[int]:
    """d1 (the cosine of i = 0) and the sines d = 2i for i = 0, 1, 4, 16, ...: fast to slow."""
    dims, i = [0, 1], 1
    while 2 * i < d_model:
        dims.append(2 * i)
        i *= 4
    return dims[: min(d_model, len(dims))]


def _next_tokens(trace: Trace) -> list[dict]:
    """Per decoder step t: the TOP most likely next tokens, and the token that came next."""
    piece = trace.target_piece
    chosen = [*trace.target.ids[1:], EOS_ID]  # what follows decoder input t
    probs, ids = trace.probabilities.topk(min(TOP, trace.probabilities.size(-1)), dim=-1)
    found = []
    for t, (p_row, id_row) in enumerate(zip(probs.tolist(), ids.tolist(), strict=True)):
        p_chosen = trace.probabilities[t, chosen[t]]
        rank = int((trace.probabilities[t] > p_chosen).sum()) + 1
        found.append({"top": [[i, piece(i), p] for i, p in zip(id_row, p_row, strict=True)],
                      "chosen": [chosen[t], piece(chosen[t]), float(p_chosen), rank]})  # fmt: skip
    return found


def _beam(trace: Trace) -> dict:
    """The tree of sentence 0: its nodes, the n-best, and the search's settings."""
    nodes, piece = trace.tree.nodes[0], trace.target_piece
    rows = [[n.step, n.parent, piece(n.tokens[-1]), n.tokens[-1], n.log_prob, n.status,
             n.score, n.penalty] for n in nodes]  # fmt: skip
    where = {tuple(n.tokens): i for i, n in enumerate(nodes) if n.status == FINISHED}
    nbest = [{"node": where.get((*h.tokens, EOS_ID)), "score": h.score, "log_prob": h.log_prob,
              "pieces": [piece(i) for i in h.tokens]} for h in trace.nbest]  # fmt: skip
    return {"nodes": rows, "nbest": nbest, "last_step": trace.tree.last_step.get(0, 0),
            "beam_size": trace.decode.beam_size, "alpha": trace.decode.length_penalty,
            "max_len": trace.max_len}  # fmt: skip
