"""The search primitives: what greedy search, sampling and beam search share.

Every search runs the encoder once, then the decoder step by step: at step t the decoder reads
<s> y1 .. yt and scores the next token. With ``use_cache=True`` (the default) only the new token
goes through the decoder and the keys/values of earlier steps come from a ``DecoderCache``
(``cache.py``); with ``use_cache=False`` the whole prefix is re-run at every step, the slow way,
kept to check that the cache changes nothing.

Shared rules of every search:
- a sentence may produce at most ``max_len_a · src_len + b`` tokens (src_len counts its real,
  non-pad source tokens; raised to make room for ``min_len`` and a forced prefix), then EOS is
  forced, so every hypothesis ends with EOS;
- PAD and BOS are never generated;
- the rules of ``constraints.py`` (prefix, minimum length, n-gram and repetition controls) act
  on every step's scores;
- a sentence that has finished leaves the running batch (``cache.keep``), so later steps only
  pay for the sentences still being decoded;
- the model runs under ``torch.inference_mode()`` in eval mode; its train/eval mode is restored;
- a sentence nobody waits for any more (``stopped``: a server's client left) ends at the next
  step, like a finished one, with what it has so far (greedy: scored -inf) or none;
- every step's log-probabilities are checked for NaN and +inf (``check_scores``): weights that
  are finite but huge overflow in the forward pass, and a search ranking NaNs has no answer.

The searches (``greedy.py``, ``beam.py``; ``translation.py`` chooses among them) take an
``EncoderDecoder`` (model/base.py) and use only its ``encode``, ``decode``, ``new_cache``,
``log_probs`` and ``config.max_positions``: the Transformer, the RNN, or the tests' stub with
hand-set distributions.

Shapes: B batch, S source length, t target steps so far, K beams, N sentences still running,
V target vocabulary.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch
from torch import Tensor

from ..errors import ScoresNotFinite
from ..model.base import Cache, EncoderDecoder
from ..model.cache import DecoderCache
from ..model.linear import largest_weight
from ..vocab import BOS_ID, EOS_ID, PAD_ID
from .compiled import compiled_step, fixed_cache
from .constraints import SearchRules
from .next_tokens import NextTokens, Scratch, best, best_next_tokens

Stopped = Callable[[int], bool]  # whether nobody waits for sentence i (of a batch) any more


def within(stopped: Stopped | None, indices: list[int]) -> Stopped | None:
    """``stopped`` for a subset of the sentences: sentence j of the subset is ``indices[j]``."""
    return None if stopped is None else lambda j: stopped(indices[j])


def stopped_rows(stopped: Stopped | None, running: Tensor) -> Tensor | None:
    """(N,) True for the running sentences (``running``: their indices) nobody waits for any
    more; None when nobody watches (``stopped`` is None)."""
    if stopped is None:
        return None
    gone = [stopped(i) for i in running.tolist()]
    return torch.tensor(gone, dtype=torch.bool, device=running.device)


@dataclass
class Hypothesis:
    """One output sentence."""

    tokens: list[int]  # generated ids, without BOS and without the final EOS
    score: float  # beam search: log_prob / lp(len(tokens) + 1); greedy and sampling: log_prob
    log_prob: float  # log P(tokens + EOS | source) under the model
    # attention of the steps that produced each token and EOS, averaged as alignment.py says,
    # set only when alignments are asked for: (len(tokens) + 1, S) over the batch's padded
    # source as a search keeps it, (len(tokens) + 1, src_len) once ``translate.search`` has
    # cut it to the sentence (``alignment.cut_to_sources``)
    attention: Tensor | None = field(default=None, compare=False, repr=False)


def gnmt_length_penalty(length: int | Tensor, alpha: float) -> float | Tensor:
    """lp(Y) = ((5 + |Y|) / 6)^α (Wu et al. 2016, §7); α = 0 gives 1, i.e. no penalty.

    Beam search ranks hypotheses by log P(Y|X) / lp(Y): without it, shorter outputs win simply
    because every extra token multiplies in one more probability below 1. Computed in float64:
    at α = 10 (``DecodeConfig``'s bound) and 65,536 tokens lp is about 2.4e40, beyond float32.
    """
    if isinstance(length, Tensor):
        length = length.double()
    return ((5 + length) / 6) ** alpha


@contextmanager
def evaluating(model: EncoderDecoder) -> Iterator[None]:
    """eval() + inference_mode for the search; every module's train/eval flag is restored. A
    model in eval mode already (an engine's) is left as it is: setting and restoring the flag
    of each of its modules took a tenth of a millisecond per search."""
    training = [module for module in model.modules() if module.training]
    if training:
        model.eval()
    try:
        with torch.inference_mode():
            yield
    finally:
        for module in training:
            module.training = True


def max_output_lengths(
    model: EncoderDecoder, src_ids: Tensor, a: float, b: int, at_least: Tensor | int = 0
) -> Tensor:
    """Most tokens (before EOS) each sentence may produce: floor(a · src_len + b), (B,), at
    least ``at_least`` (room for min_len and a prefix).

    Capped so that the decoder input <s> y1 .. y_max fits in the model's positions.
    """
    return output_length_limits(src_ids, a, b, model.config.max_positions, at_least)


def output_length_limits(
    src_ids: Tensor, a: float, b: int, max_positions: int | None, at_least: Tensor | int = 0
) -> Tensor:
    """max(floor(a · src_len + b), at_least) per sentence of src_ids (B, S), src_len counting
    its non-pad tokens, capped at max_positions - 1 (None: no cap): (B,). Every engine uses
    this rule."""
    return length_limits((src_ids != PAD_ID).sum(dim=1), a, b, max_positions, at_least)


def length_limits(
    src_len: Tensor, a: float, b: int, max_positions: int | None, at_least: Tensor | int = 0
) -> Tensor:
    """max(floor(a · src_len + b), at_least), capped at max_positions - 1 (None: no cap), for
    source lengths src_len (B,): (B,). The one rule of how long a search may run: the searches,
    the CTranslate2 engine and the cost of a request (``cost.py``) all use it.

    In float64 and capped before the conversion to integers, so a large ``a`` cannot overflow
    int64 into a negative limit.
    """
    lengths = (a * src_len.double() + b).floor()  # (B,)
    at_least = torch.as_tensor(at_least, device=lengths.device, dtype=torch.float64)
    lengths = torch.maximum(lengths, at_least)
    if max_positions is not None:
        lengths = lengths.clamp(max=max_positions - 1)
    return lengths.long()


def rows_kept(running: int, rows: int) -> int:
    """How many of a batch's ``rows`` (in beam search its sentences, K rows each) stay in it
    when ``running`` of them have not finished: the smallest of 1, 2, 4, 8 and the multiples
    of 16 that holds them, at most ``rows``.

    oneDNN compiles a packed product for each number of rows it multiplies (model/linear.py:
    0.2-0.3 ms and about 0.5 MB each, kept in ``CACHE_SIZES``). Where finished
    sentences left a batch at once, its rows fell one or two at a time and most steps'
    products were compiled anew; kept to these sizes, a 64-sentence batch multiplies at most
    8 row counts, and every batch the same ones (docs/speed.md). ``rows_that_stay`` applies
    it, and lets a finished row go at its own length limit all the same."""
    for size in (1, 2, 4, 8):
        if running <= size:
            return min(size, rows)
    return min(-(-running // 16) * 16, rows)


def rows_that_stay(idle: Tensor, at_limit: Tensor, keep_idle: bool) -> tuple[Tensor | None, int]:
    """After some rows (in beam search, sentences) finished: the rows that stay in the batch,
    in order, and how many of them still run. The running rows stay, then, where
    ``keep_idle``, finished ("idle") rows up to ``rows_kept``'s size, only those short of
    their own length limit (``at_limit`` marks the last step of a row's L + 1), so that no
    sentence makes more steps than cost.py counts for it. None: every row stays.

    Shape:
        idle and at_limit (N,) -> the rows' indices (R,) or None, and their running count.
    """
    live = (~idle).nonzero().squeeze(1)  # (L,)
    spare = (idle & ~at_limit).nonzero().squeeze(1)  # idle rows that may go on
    size = rows_kept(live.numel(), idle.numel()) if keep_idle else live.numel()
    size = min(size, live.numel() + spare.numel())
    if size == idle.numel():
        return None, live.numel()
    return torch.cat([live, spare[: size - live.numel()]]), live.numel()


def room_needed(min_len: int, prefix: Tensor | None) -> Tensor | int:
    """The output length each sentence needs at least: min_len, and its prefix's length (B,)."""
    if prefix is None:
        return min_len
    return (prefix != PAD_ID).sum(dim=1).clamp(min=min_len)  # (B,)


def check_scores(
    model: EncoderDecoder, total: Tensor, logits: Tensor | None, memory: Tensor, step: int | None
) -> None:
    """A one-line ``ScoresNotFinite`` when ``total`` is NaN or +inf: the sum of a step's
    log-probabilities (..., V), or their log-normalisers log Σ exp(logits) (N,), which are not
    finite exactly when a logit is NaN or +inf. Names what overflowed first (the encoder's
    output or the decoder's logits), in which dtype, and the largest weight. −inf log-probs are
    allowed: a token the model rules out (an output bias of −inf).

    Weights of huge finite magnitude pass the load's finiteness check (every 7th 3e38 does) but
    overflow in float32 (or float16 under autocast), and then greedy search picked a NaN's
    token, beam search indexed past its candidates and sampling failed in ``multinomial``.
    One reduction and one read per step: log-probabilities are <= 0, so their sum is NaN or
    +inf exactly when one of them is.

    Args:
        logits: the decoder's output the scores come from, when the search has it whole;
            memory: the encoder's.
        step: the output step of a search, for the message; None when scoring.
    """
    if bool(total.sum() < float("inf")):  # False for NaN and +inf alone: two calls a step
        return
    if not bool(memory.isfinite().all()):
        what, dtype = "the encoder's output", memory.dtype
    elif logits is None or bool((logits.isnan() | (logits == float("inf"))).any()):
        what = "the decoder's output (its logits)"
        dtype = (memory if logits is None else logits).dtype
    else:
        what, dtype = "the log-softmax of the logits", total.dtype
    where = "while scoring" if step is None else f"at output step {step}"
    top = largest_weight(model)
    largest = f"; its largest weight is {top:.3g}" if top is not None else ""
    raise ScoresNotFinite(f"the model's scores are not finite: {what} overflowed to inf or NaN "
                          f"in {str(dtype).removeprefix('torch.')} {where}{largest}; these "
                          "weights are too large to compute with")  # fmt: skip


def force_eos(log_probs: Tensor, at_limit: Tensor) -> None:
    """Rows at their length limit may only produce EOS (at the model's own log-probability).

    Only those rows are written: building a (rows, V) mask at every step instead took 7% of a
    beam search on a CPU (torch.profiler, ``small`` preset).
    """
    rows = at_limit.nonzero().squeeze(1)  # (R,)
    if rows.numel():
        eos = log_probs[rows, EOS_ID]  # (R,)
        log_probs[rows] = float("-inf")
        log_probs[rows, EOS_ID] = eos


class AttentionTrail:
    """Where the rows of a search read the source at each step (word alignments), kept without
    copying the history at every step: each step's rows, and which row of one step each row of
    the next continues (beams reordered, rows that left). A row's history is read back along
    those links when its hypothesis finishes, as beam search's backpointers are (copying the
    whole history at every beam reordering made the longest searches 2.4x slower)."""

    def __init__(self) -> None:
        self.steps: list[Tensor] = []  # (rows at step t, S) each
        self.links: list[Tensor | None] = []  # [t]: step t's row behind each of step t+1's
        self.pending: Tensor | None = None  # the last step's row behind each row now (None: same)

    def add(self, attention: Tensor) -> None:
        """The newest step's attention, one row per row of the batch now: (rows, S)."""
        if self.steps:
            self.links.append(self.pending)
        self.steps.append(attention)
        self.pending = None

    def select(self, rows: Tensor) -> None:
        """Row i of the batch continues old row ``rows[i]``."""
        self.pending = rows if self.pending is None else self.pending.index_select(0, rows)

    def of(self, rows: list[int]) -> list[Tensor]:
        """The attention of the batch's ``rows`` at every step so far: (steps, S) each."""
        index = torch.tensor(rows, dtype=torch.long, device=self.steps[-1].device)  # (n,)
        if self.pending is not None:
            index = self.pending[index]
        picked = [self.steps[-1][index]]  # (n, S) per step, the newest first
        for step in range(len(self.steps) - 2, -1, -1):
            link = self.links[step]
            if link is not None:
                index = link[index]
            picked.append(self.steps[step][index])
        return list(torch.stack(picked[::-1], dim=1).unbind(0))  # n of (steps, S)


class RunningBatch:
    """The rows being decoded: their decoder inputs so far and what decoding them needs.

    ``rules`` act on every step's scores; ``prefix`` (rows, P), right-padded with PAD_ID, holds
    the tokens each row is forced to start with (``constraints.py``). With ``aligned``, each
    step keeps where every row read the source (``model.decode_aligned``), in ``attention``:
    an alignment costs no second pass over the hypotheses.
    """

    def __init__(
        self, model: EncoderDecoder, memory: Tensor, src_mask: Tensor, use_cache: bool,
        rules: SearchRules = SearchRules(), prefix: Tensor | None = None,  # noqa: B008 (frozen)
        longest: int = 0, aligned: bool = False, beams: int = 1,
    ):  # fmt: skip
        """``longest``: the most tokens an output may have (0: not known), which the cache
        makes room for; ``beams``: the rows each sentence will have (a beam search's K)."""
        self.model = model
        # (sentences or rows, S, D), (sentences or rows, 1, 1, S): see ``shared``
        self.memory, self.src_mask = memory, src_mask
        # a compiled step where ``compile_decoding`` made one (compiled.py), over its fixed cache;
        # none where the attention is kept, which a compiled step does not return, nor for a
        # batch of one row throughout (one sentence, one row each), which the compiled step
        # would run uncompiled over its fixed cache, slower than the eager step (docs/speed.md)
        compiled = use_cache and not aligned and memory.size(0) * beams > 1
        self.step = compiled_step(model) if compiled else None
        # The beams of a sentence read the same encoder output: where the model can (its
        # ``beams_share_memory``; not in a compiled step), the encoder output, its mask and the
        # cached encoder-decoder keys and values stay one row per sentence, not one per beam.
        self.shared = model.beams_share_memory and self.step is None
        self.cache: Cache | None = None
        if self.step is not None:
            self.cache = fixed_cache(model, longest)
        elif use_cache:
            self.cache = model.new_cache(longest + 1 if longest else 0)
        self.tokens = torch.full((memory.size(0), 1), BOS_ID, device=src_mask.device)  # (rows, 1)
        self.attention = AttentionTrail() if aligned else None  # each step's, when ``aligned``
        self.rules, self.prefix = rules, prefix
        self.scratch = Scratch()  # the vocabulary step's buffers, reused at every step

    def next_log_probs(self) -> Tensor:
        """log P(next token | source, tokens so far) for every row, PAD and BOS banned and the
        search rules applied: (rows, V)."""
        logits = self._decoded(logits=True)  # (rows, V)
        log_probs = self.model.log_probs(self.rules.penalize(logits, self.tokens))  # (rows, V)
        check_scores(self.model, log_probs, logits, self.memory, self.tokens.size(1) - 1)
        log_probs[:, [PAD_ID, BOS_ID]] = float("-inf")
        self.rules.restrict(log_probs, self.tokens, self.prefix)
        return log_probs

    def next_best(self, k: int, at_limit: Tensor) -> NextTokens:
        """The k most likely next tokens of every row, best first, EOS forced on the rows
        ``at_limit`` (rows,): all that greedy search (k = 1) and beam search (k = 2K) keep of
        a step. Without search rules and prefixes, the whole vocabulary's log-probabilities are
        never made (``next_tokens.py``); the rules act on them, so with rules they are."""
        if self.rules.active or self.prefix is not None:
            log_probs = self.next_log_probs()  # (rows, V)
            force_eos(log_probs, at_limit)
            return NextTokens(*best(log_probs, k), log_normaliser=log_probs.new_zeros(0))
        hidden = self._decoded(logits=False)  # (rows, D)
        found = best_next_tokens(hidden, self.model.output, k, at_limit, self.scratch)
        check_scores(self.model, found.log_normaliser, None, self.memory, self.tokens.size(1) - 1)
        return found

    def _decoded(self, logits: bool) -> Tensor:
        """The decoder's output for the newest position of every row: its logits (rows, V),
        or its hidden state (rows, D) before the final linear layer."""
        if self.attention is not None:
            return self._decoded_aligned(logits)
        decode = self.model.decode if logits else self.model.decode_hidden
        if self.cache is None:  # the whole prefix again
            return decode(self.tokens, self.memory, self.src_mask)[:, -1]  # from (rows, t+1, ·)
        new = self.tokens[:, -1:]  # (rows, 1) only the newest token; earlier keys/values come
        if self.step is None:  # from the cache
            return decode(new, self.memory, self.src_mask, self.cache)[:, -1]
        assert isinstance(self.cache, DecoderCache)
        hidden = self.step(new, self.memory, self.src_mask, self.cache)  # (rows, D)
        return self.model.output(hidden) if logits else hidden

    def _decoded_aligned(self, logits: bool) -> Tensor:
        """``_decoded``, keeping where each row read the source at this step in ``attention``."""
        assert self.attention is not None and self.step is None
        new = self.tokens if self.cache is None else self.tokens[:, -1:]  # (rows, T)
        hidden, attention = self.model.decode_aligned(new, self.memory, self.src_mask, self.cache)
        self.attention.add(attention[:, -1])  # (rows, S)
        hidden = hidden[:, -1]  # (rows, D)
        return self.model.output(hidden) if logits else hidden

    def attention_of(self, rows: list[int]) -> list[Tensor | None]:
        """Where each of ``rows`` read the source at every step so far, (steps, S) each, if
        ``aligned``."""
        return [None] * len(rows) if self.attention is None else self.attention.of(rows)

    def append(self, next_tokens: Tensor) -> None:
        """Adds one token (rows,) to every prefix."""
        self.tokens = torch.cat([self.tokens, next_tokens[:, None]], dim=1)  # (rows, t+1)

    def select(self, rows: Tensor, sentences: Tensor | None = None) -> None:
        """Row i continues old row ``rows[i]``; ``sentences``: the running sentences that stay
        (their indices, in order), None when they all do (a beam reordering within each
        sentence, or a sentence's first row copied into its beams).

        What is kept per sentence (``shared``) moves only when sentences leave; what is kept
        per row moves with the rows (the encoder output only when the rows change sentences).
        """
        self.tokens = self.tokens.index_select(0, rows)
        if self.attention is not None:
            self.attention.select(rows)
        if self.prefix is not None:
            self.prefix = self.prefix.index_select(0, rows)
        if self.shared:
            moved = sentences
        else:
            same = sentences is None and rows.numel() == self.memory.size(0)
            moved = None if same else rows
        if moved is not None:
            self.memory = self.memory.index_select(0, moved)
            self.src_mask = self.src_mask.index_select(0, moved)
        if self.cache is None:
            return
        if moved is None:
            self.cache.reorder(rows)
        else:
            self.cache.keep(rows, moved)
