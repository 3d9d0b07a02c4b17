"""Beam search: keep the K best prefixes of each sentence instead of one.

Greedy search commits to the most likely token at every step and cannot take it back; a token
that looks best now may lead to a poor sentence. Beam search (Sutskever et al. 2014; Vaswani et
al. §6.1 use K = 4, α = 0.6) keeps K prefixes, the "beams", and at every step of a sentence:

1. extends every beam by every token, each candidate scored by its total log-prob; only each
   beam's 2K most likely tokens are looked at, since the 2K best of the K·V candidates are
   among those (``next_tokens.py``: the whole vocabulary's log-probabilities are never made);
2. takes the 2K best candidates: those among the top K that end with EOS become finished
   hypotheses, scored log P / lp with the GNMT length penalty lp; the K best that do not end
   become the new beams (at most one EOS per beam, so 2K always hold K that continue);
3. stops when it has ``nbest`` finished hypotheses and no beam can still beat the worst of them,
   or at its length limit, where EOS is forced.

The bound in 3: a beam's log-prob s <= 0 only falls as tokens are added, so any hypothesis it
finishes as, of length L <= max_len + 1, scores at most s / lp(L); for α >= 0 lp grows with L, so
s / lp(max_len + 1) bounds them all. Stopping at the first EOS, or as soon as ``nbest``
hypotheses have finished, can miss a better hypothesis that is still running.

A forced prefix (``constraints.py``) leaves one candidate per beam while it lasts, so only beam
0 (the prefix) stays finite, as at the first step; the K beams fan out after it.

The running batch holds N·K rows: row n·K + k is beam k of running sentence n (the first step,
where every beam is the same <s>, runs once per sentence and is then copied). The encoder output
and the encoder-decoder keys/values stay one per sentence: the decoder folds a sentence's K
beams into one row of its cross-attention (``model.beams_share_memory``; the RNN copies them
into every beam's row instead). Reordering beams moves only the cached self-attention
keys/values (``cache.reorder``); a finished sentence's rows leave the batch, and its
encoder-decoder entries with them (``cache.keep``), once the sentences still running fit a
smaller size (``search.rows_kept``; until then they stay, idle, their candidates unused).

Shapes: B batch, N sentences still running, K beams, V target vocabulary, S source length.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from ..config import DecodeConfig
from ..model.base import EncoderDecoder
from ..vocab import EOS_ID
from .beam_tree import BeamStep
from .constraints import SearchRules
from .search import (
    Hypothesis,
    RunningBatch,
    Stopped,
    evaluating,
    gnmt_length_penalty,
    max_output_lengths,
    room_needed,
    rows_that_stay,
    stopped_rows,
)


def beam_search(
    model: EncoderDecoder,
    src_ids: Tensor,
    config: DecodeConfig = DecodeConfig(),  # noqa: B008 (frozen, so sharing it is safe)
    use_cache: bool = True,
    prefix: Tensor | None = None,
    recorder: Callable[[BeamStep], None] | None = None,
    stopped: Stopped | None = None,
) -> list[list[Hypothesis]]:
    """The ``nbest`` best hypotheses per sentence that a beam of ``beam_size`` finds.

    Args:
        model: the Transformer or the RNN encoder-decoder.
        src_ids: source ids (B, S), right-padded with PAD_ID.
        config: ``beam_size`` (K, the prefixes kept per sentence), ``length_penalty`` (GNMT α;
            score = log P / ((5 + |Y|) / 6)^α, |Y| counting EOS; 0: none), ``max_len_a`` and
            ``max_len_b`` (at most floor(a · src_len + b) tokens before EOS) and ``nbest``
            (hypotheses returned per sentence, <= beam_size: DecodeConfig's rule) are used, with
            the rules of ``constraints.py`` (``min_len``, ``no_repeat_ngram``,
            ``repetition_penalty``).
        use_cache: decode incrementally with the key/value cache (False: re-run the prefix).
        prefix: (B, P) target ids each output must start with, right-padded with PAD_ID; their
            log-probabilities count in the score.
        recorder: called with every step's candidates (``beam_tree.BeamTree`` draws the tree).
        stopped: whether nobody waits for sentence i any more: it ends at the next step, with
            the hypotheses that have finished by then.
    Shape:
        returns B lists of up to ``nbest`` hypotheses, best score first, in the order of src_ids.
    """
    with evaluating(model):
        return _beam_search(model, src_ids, config, use_cache, prefix, recorder, stopped)


def _beam_search(
    model: EncoderDecoder,
    src_ids: Tensor,
    config: DecodeConfig,
    use_cache: bool,
    prefix: Tensor | None,
    recorder: Callable[[BeamStep], None] | None,
    stopped: Stopped | None,
) -> list[list[Hypothesis]]:
    """The search loop; see the module docstring."""
    B, device = src_ids.size(0), src_ids.device
    if B == 0:
        return []
    K, alpha, nbest = config.beam_size, config.length_penalty, config.nbest
    memory, src_mask = model.encode(src_ids)  # (B, S, D), (B, 1, 1, S): once per source
    room = room_needed(config.min_len, prefix)  # (B,) or a number
    max_lens = max_output_lengths(model, src_ids, config.max_len_a, config.max_len_b, room)  # (B,)
    beams_of = torch.arange(B, device=device).repeat_interleave(K)  # (B·K,) sentence of each row
    rules = SearchRules.of(config, int(max_lens.max()))
    longest = int(max_lens.max())
    batch = RunningBatch(model, memory, src_mask, use_cache, rules, prefix, longest,
                         config.alignment, beams=K)  # B rows  # fmt: skip
    running = torch.arange(B, device=device)  # (N,) sentence of each running block of K rows
    # The K beams all start as the same <s>: only beam 0 may be extended at the first step, or
    # the beam would fill with K copies of the same candidates.
    beam_log_probs = torch.full((B, K), float("-inf"), device=device)  # (N, K)
    beam_log_probs[:, 0] = 0.0
    finished: list[list[Hypothesis]] = [[] for _ in range(B)]  # per sentence, best first
    # Sentences that are done but stay in the batch (idle), their candidates made and not used,
    # until the rest fit a smaller size (``search.rows_that_stay``): few row counts, so that
    # the compiled products fit oneDNN's cache. An idle sentence leaves at its own length limit
    # (cost.py counts K · (L + 1) steps for it), and none stays where the steps are recorded.
    keep_done = recorder is None
    idle = torch.zeros(B, dtype=torch.bool, device=device)  # (N,)
    some_idle = False
    for step in range(int(max_lens.max()) + 1):
        N = running.size(0)
        at_limit = max_lens[running] <= step  # (N,)
        # The 2K best of each beam's tokens hold the 2K best candidates of its sentence.
        if step == 0:  # the K beams are the same <s> so far: decoded once, then copied
            found = batch.next_best(2 * K, at_limit)  # (B, 2K)
            batch.select(beams_of)  # each sentence's row copied into its K beams
            log_probs, tokens = found.log_probs.repeat_interleave(K, dim=0), found.tokens
            tokens = tokens.repeat_interleave(K, dim=0)  # (B·K, 2K) each
        else:
            found = batch.next_best(2 * K, at_limit.repeat_interleave(K))  # (N·K, 2K)
            log_probs, tokens = found.log_probs, found.tokens
        C = log_probs.size(-1)  # 2K, or fewer in a vocabulary that small
        candidates = beam_log_probs[:, :, None] + log_probs.view(N, K, C)  # (N, K, C)
        top, index = candidates.view(N, K * C).topk(2 * K, dim=1)  # (N, 2K), best first
        beam, token = index // C, tokens.view(N, K * C).gather(1, index)  # which beam, by what

        ends = (token[:, :K] == EOS_ID) & top[:, :K].isfinite()  # (N, K)
        if some_idle:
            ends = ends & ~idle[:, None]
        if ends.any():
            n, j = ends.nonzero(as_tuple=True)
            rows = (n * K + beam[n, j]).tolist()
            tokens = batch.tokens[rows, 1:].tolist()  # without BOS and EOS
            penalty = gnmt_length_penalty(step + 1, alpha)  # step tokens + EOS
            sentences, attention = running[n].tolist(), batch.attention_of(rows)
            for sentence, ids, log_prob, read in zip(sentences, tokens, top[n, j].tolist(),
                                                     attention, strict=True):  # fmt: skip
                kept = finished[sentence]
                kept.append(Hypothesis(ids, score=log_prob / penalty, log_prob=log_prob,
                                       attention=read))  # fmt: skip
                kept.sort(key=lambda h: h.score, reverse=True)
                del kept[nbest:]

        go_on = (token == EOS_ID).to(torch.int8).argsort(dim=1, stable=True)[:, :K]  # (N, K)
        if recorder is not None:  # the step-through view's tree (beam_tree.py)
            lp = gnmt_length_penalty(step + 1, alpha)
            recorder(BeamStep(step, running, batch.tokens, top, beam, token, ends, go_on, lp))
        beam_log_probs = top.gather(1, go_on)  # the K best candidates that do not end
        token = token.gather(1, go_on)
        rows = (torch.arange(N, device=device) * K)[:, None] + beam.gather(1, go_on)  # (N, K)

        # Done: at the limit, or nbest have finished and no beam can still beat the worst of them.
        kept = [finished[i] for i in running.tolist()]
        worst = [hyps[-1].score if len(hyps) >= nbest else float("-inf") for hyps in kept]
        reachable = best_reachable(beam_log_probs, max_lens[running], step, alpha)  # (N,)
        done = at_limit | (reachable <= torch.tensor(worst, device=device))
        left = stopped_rows(stopped, running)  # (N,) nobody waits for these any more
        if left is not None:
            done = done | left
        alive = None  # (N',) the sentences that stay: all where None
        if some_idle:
            done = done & ~idle
        if done.any() or some_idle and bool((idle & at_limit).any()):
            idle = idle | done
            alive, live = rows_that_stay(idle, at_limit, keep_done)
            if live == 0:
                break
            some_idle = (N if alive is None else alive.numel()) > live
        if alive is not None:
            running, beam_log_probs, idle = running[alive], beam_log_probs[alive], idle[alive]
            rows, token = rows[alive], token[alive]
            # The beam rows reorder and drop in one go; the sentences that stay keep theirs.
            batch.select(rows.flatten(), alive)
        else:
            batch.select(rows.flatten())
        batch.append(token.flatten())
    return finished


def best_reachable(beam_log_probs: Tensor, max_lens: Tensor, step: int, alpha: float) -> Tensor:
    """(N,) the highest score any beam of each sentence could still finish with."""
    best = beam_log_probs.max(dim=1).values  # (N,) log-probs only fall from here
    # A beam finishes at length step + 2 at the earliest and max_len + 1 at the latest; lp is
    # monotonic in the length, so the best score it can reach is at one of the two ends.
    return torch.maximum(
        best / gnmt_length_penalty(max_lens + 1, alpha),
        best / gnmt_length_penalty(step + 2, alpha),
    )
