"""Lexically constrained beam search: every output must contain given target terms (a
glossary's, ``glossary.py``), found by dynamic beam allocation (Post & Vilar 2018).

Plain beam search (``beam.py``) keeps the K prefixes the model likes best, so a term the model
finds unlikely never enters the beam. This search changes only which candidates the beam keeps
at each step; the model, the scores and the other rules (``constraints.py``) are those of
plain beam search:

1. a beam that has not met all its terms may not end: its EOS is banned (at its length limit
   EOS is forced all the same);
2. the candidates are the 2K best extensions of the K beams (as in plain beam search), plus,
   for every live beam, its own best token, every token that makes progress on a term
   (``TermState.next_tokens``) and, once it has met every term, EOS;
3. every candidate that ends in EOS finishes: ending costs no place in the beam, and a
   hypothesis that met every term early must not be lost to the allocation of step 4;
4. a candidate's bank is the number of term tokens it has produced (``TermState.bank``); the
   K new beams are shared round-robin among the banks (``allocate``), so that hypotheses that
   have met more of the terms are not crowded out by the model's favourites, nor those by
   them;
5. a sentence stops when ``nbest`` hypotheses that met every term have finished and no beam can
   beat the worst of them (the bound of ``beam.py``), or at its length limit.

The length limit is raised to make room for the terms, as it is for a prefix. A hypothesis that
the limit ends before it has met every term is kept, ranked below every one that met them all;
the caller can tell from its tokens (``translation.py`` warns). A beam of 1 (greedy search) is
this search with one slot, which always goes to the highest bank: each term is produced as
early as it can be. Post & Vilar recommend a beam wider than the number of term tokens.

A sentence without terms keeps exactly the 2K best candidates in plain beam search's order, so
its hypotheses are those ``beam_search`` finds in the same batch. The candidates of a sentence
with terms are gathered in Python, a few per beam; the vectorised form of the same allocation
(Hu et al. 2019) is what fairseq's ``--constraints`` runs.

Shapes: B batch, N sentences still running, K beams, V target vocabulary, S source length.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ..config import DecodeConfig
from ..model.base import EncoderDecoder
from ..vocab import EOS_ID, PAD_ID
from .beam import best_reachable
from .constraints import SearchRules, TermState, allocate
from .search import (
    Hypothesis,
    RunningBatch,
    Stopped,
    evaluating,
    force_eos,
    gnmt_length_penalty,
    max_output_lengths,
    stopped_rows,
)

Terms = list[list[list[int]]]  # per sentence, the target id sequences its output must contain


def constrained_beam_search(
    model: EncoderDecoder,
    src_ids: Tensor,
    terms: Terms,
    config: DecodeConfig = DecodeConfig(),  # noqa: B008 (frozen, so sharing it is safe)
    use_cache: bool = True,
    prefix: Tensor | None = None,
    stopped: Stopped | None = None,
) -> list[list[Hypothesis]]:
    """The ``nbest`` best hypotheses per sentence that contain its terms.

    Args:
        model: what ``beam_search`` takes.
        src_ids: source ids (B, S), right-padded with PAD_ID.
        terms: per sentence, the target id sequences its output must contain, each as often as
            it is listed ([] for none).
        config, use_cache, prefix, stopped: as for ``beam_search``.
    Shape:
        returns B lists of up to ``nbest`` hypotheses, in the order of src_ids: those that met
        every term first, each group best score first.
    """
    if config.nbest > config.beam_size:
        raise ValueError(f"need nbest <= beam_size, got {config.nbest} > {config.beam_size}")
    if len(terms) != src_ids.size(0):
        raise ValueError(f"{len(terms)} term lists for {src_ids.size(0)} sentences")
    with evaluating(model):
        return _search(model, src_ids, terms, config, use_cache, prefix, stopped)


def _search(
    model: EncoderDecoder,
    src_ids: Tensor,
    terms: Terms,
    config: DecodeConfig,
    use_cache: bool,
    prefix: Tensor | None,
    stopped: Stopped | None,
) -> list[list[Hypothesis]]:
    """The search loop; see the module docstring."""
    B, device = src_ids.size(0), src_ids.device
    if B == 0:
        return []
    K, alpha, nbest = config.beam_size, config.length_penalty, config.nbest
    memory, src_mask = model.encode(src_ids)  # (B, S, D), (B, 1, 1, S)
    forced = torch.zeros(B, dtype=torch.long, device=device)  # (B,) prefix tokens
    if prefix is not None:
        forced = (prefix != PAD_ID).sum(dim=1)
    term_tokens = torch.tensor([sum(map(len, t)) for t in terms], device=device)  # (B,)
    room = (forced + term_tokens).clamp(min=config.min_len)  # (B,) prefix, terms, min_len
    max_lens = max_output_lengths(model, src_ids, config.max_len_a, config.max_len_b, room)  # (B,)
    beams_of = torch.arange(B, device=device).repeat_interleave(K)  # (B·K,)
    rules = SearchRules.of(config, int(max_lens.max()))
    longest, aligned = int(max_lens.max()), config.alignment
    batch = RunningBatch(
        model, memory, src_mask, use_cache, rules, prefix, longest, aligned, beams=K
    )
    running = torch.arange(B, device=device)  # (N,)
    beam_log_probs = torch.full((B, K), float("-inf"), device=device)  # (N, K)
    beam_log_probs[:, 0] = 0.0  # the K beams are the same <s>: only beam 0 is extended at first
    states = [[TermState.start(t)] * K for t in terms]  # (N, K) how far each beam has got
    finished: list[list[tuple[bool, Hypothesis]]] = [[] for _ in range(B)]  # (met all, hypothesis)
    for step in range(int(max_lens.max()) + 1):
        N = running.size(0)
        log_probs = batch.next_log_probs()  # (N·K, V); (B, V) at step 0
        if step == 0:
            log_probs = log_probs.repeat_interleave(K, dim=0)  # (B·K, V)
            batch.select(beams_of)
        V = log_probs.size(-1)
        at_limit = max_lens[running].le(step).repeat_interleave(K)  # (N·K,)
        unmet = torch.tensor([not s.done for beams in states for s in beams], device=device)
        log_probs[unmet & ~at_limit, EOS_ID] = float("-inf")  # 1. no end before every term
        force_eos(log_probs, at_limit)
        candidates = beam_log_probs[:, :, None] + log_probs.view(N, K, V)  # (N, K, V)
        top, index = candidates.view(N, K * V).topk(2 * K, dim=1)  # (N, 2K), best first
        beam, token = index // V, index % V
        kept_states = []  # per sentence, the state of each of its 2K candidates
        for n in range(N):
            if terms[int(running[n])]:
                top[n], beam[n], token[n], chosen = _allocated(
                    candidates[n], beam_log_probs[n], states[n], top[n], beam[n], token[n]
                )
                kept_states.append(chosen)
            else:  # plain beam search: no terms, nothing to track
                kept_states.append([states[n][0]] * (2 * K))

        ends = (token[:, :K] == EOS_ID) & top[:, :K].isfinite()  # (N, K)
        if ends.any():
            n, j = ends.nonzero(as_tuple=True)
            rows = (n * K + beam[n, j]).tolist()
            tokens = batch.tokens[rows, 1:].tolist()  # without BOS and EOS
            penalty = gnmt_length_penalty(step + 1, alpha)
            attention = batch.attention_of(rows)
            for n_, j_, read, ids, log_prob in zip(n.tolist(), j.tolist(), attention, tokens,
                                                   top[n, j].tolist(), strict=True):  # fmt: skip
                kept = finished[int(running[n_])]
                met = kept_states[n_][j_].done
                kept.append((met, Hypothesis(ids, score=log_prob / penalty, log_prob=log_prob,
                                             attention=read)))  # fmt: skip
                kept.sort(key=lambda found: (found[0], found[1].score), reverse=True)
                del kept[nbest:]

        go_on = (token == EOS_ID).to(torch.int8).argsort(dim=1, stable=True)[:, :K]  # (N, K)
        beam_log_probs = top.gather(1, go_on)
        token = token.gather(1, go_on)
        rows = (torch.arange(N, device=device) * K)[:, None] + beam.gather(1, go_on)  # (N, K)
        states = [[kept_states[n][j] for j in picks] for n, picks in enumerate(go_on.tolist())]

        # Done: at the limit, or nbest that met every term have finished and no beam can still
        # beat the worst of them.
        worst = []
        for i in running.tolist():
            met = [h.score for ok, h in finished[i] if ok]
            worst.append(met[-1] if len(met) >= nbest else float("-inf"))
        reachable = best_reachable(beam_log_probs, max_lens[running], step, alpha)  # (N,)
        done = max_lens[running].le(step) | (reachable <= torch.tensor(worst, device=device))
        left = stopped_rows(stopped, running)
        if left is not None:
            done = done | left
        if done.any():
            alive = (~done).nonzero().squeeze(1)
            if alive.numel() == 0:
                break
            running, beam_log_probs = running[alive], beam_log_probs[alive]
            rows, token = rows[alive], token[alive]
            states = [states[i] for i in alive.tolist()]
            batch.select(rows.flatten(), alive)
        else:
            batch.select(rows.flatten())
        batch.append(token.flatten())
    return [[h for _, h in found] for found in finished]


def _allocated(
    candidates: Tensor, beam_log_probs: Tensor, states: list[TermState], top: Tensor,
    beam: Tensor, token: Tensor,
) -> tuple[Tensor, Tensor, Tensor, list[TermState]]:  # fmt: skip
    """One sentence's 2K candidates (steps 2 to 4) laid out as plain beam search's are, and the
    state each would be in: first the candidates that end, then the K that continue, chosen by
    dynamic beam allocation, then -inf fillers. candidates (K, V), beam_log_probs (K,); top,
    beam and token (2K,): plain beam search's choice."""
    K = beam_log_probs.size(0)
    pairs = dict.fromkeys(zip(beam.tolist(), token.tolist(), strict=True))  # best first
    best = candidates.argmax(dim=1).tolist()  # (K,) each beam's own best token
    for k in beam_log_probs.isfinite().nonzero().squeeze(1).tolist():
        extra = [best[k], *sorted(states[k].next_tokens()), *([EOS_ID] if states[k].done else [])]
        pairs.update(dict.fromkeys((k, t) for t in extra))
    ks, ts = (list(side) for side in zip(*pairs, strict=True))
    scores = candidates[ks, ts].tolist()
    finite = [i for i, s in enumerate(scores) if s != float("-inf")]
    ends = [i for i in finite if ts[i] == EOS_ID]  # at most one per beam, so at most K
    goes = [i for i in finite if ts[i] != EOS_ID]
    after = [states[ks[i]].advance(ts[i]) for i in goes]
    kept = allocate([s.bank for s in after], [scores[i] for i in goes], K)
    picked = ends + [goes[p] for p in kept]
    chosen = [states[ks[i]] for i in ends] + [after[p] for p in kept]
    fillers = 2 * K - len(picked)  # too few finite candidates: beams that stay at -inf
    device = top.device
    return (torch.tensor([scores[i] for i in picked] + [float("-inf")] * fillers, device=device,
                         dtype=top.dtype),
            torch.tensor([ks[i] for i in picked] + [0] * fillers, device=device),
            torch.tensor([ts[i] for i in picked] + [PAD_ID] * fillers, device=device),
            chosen + [states[0]] * fillers)  # fmt: skip
