"""Greedy search and sampling: one hypothesis per sentence, one token per step.

Greedy search takes the most likely next token; sampling draws it from the model's distribution,
sharpened or flattened by a temperature and cut to the top k (Fan et al. 2018) or to the
nucleus of probability p (Holtzman et al. 2020). Both stop a sentence at EOS and follow the
shared rules of ``search.py`` and ``constraints.py`` (a forced prefix, a minimum length, n-gram
and repetition controls).

A draw is one uniform number u per row and step, read off the row's cumulative distribution:
the first token whose cumulative probability reaches u times the total (``draw_tokens``). Each
row's numbers come from a generator of its own when the search is seeded (``row_seeds``: the
seed, the row's source and prefix, and which of its sentence's samples it is), so that a
sentence's samples do not depend on what else is in its batch, or on which thread decodes it;
unseeded, from torch's global generator.

Shapes: B batch, S source length, N sentences still running, V target vocabulary.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence

import torch
from torch import Tensor

from ..config import DecodeConfig
from ..model.base import EncoderDecoder
from ..vocab import EOS_ID, PAD_ID
from .constraints import SearchRules, nucleus
from .search import (
    Hypothesis,
    RunningBatch,
    Stopped,
    evaluating,
    force_eos,
    max_output_lengths,
    room_needed,
    rows_that_stay,
    stopped_rows,
)

# What the CTranslate2 engine answers to a seed: its generator is one for every sentence
NO_SEED = (
    "the ctranslate2 engine draws from one generator for all sentences, so a seed cannot make "
    "each sentence's samples its own; use the torch engine for decode.sampling_seed"
)

# (the running batch, its rows at their length limit (N,), each row's sentence (N,)) -> each
# row's next token and its log-probability, (N,) and (N,)
Choose = Callable[[RunningBatch, Tensor, Tensor], tuple[Tensor, Tensor]]


def _search_one_path(
    model: EncoderDecoder,
    src_ids: Tensor,
    choose: Choose,
    config: DecodeConfig,
    use_cache: bool,
    prefix: Tensor | None,
    stopped: Stopped | None = None,
    keep_finished: bool = False,
) -> list[Hypothesis]:
    """Greedy search and sampling: one hypothesis per sentence, the next token ``choose``'s.
    ``keep_finished``: finished rows stay in the batch while the rest fit no smaller size
    (``rows_that_stay``); sampling does not keep them, since a finished row's distribution may be
    empty (every token banned), where ``multinomial`` fails."""
    if src_ids.size(0) == 0:
        return []
    memory, src_mask = model.encode(src_ids)
    room = room_needed(config.min_len, prefix)
    max_lens = max_output_lengths(model, src_ids, config.max_len_a, config.max_len_b, room)  # (B,)
    rules = SearchRules.of(config, int(max_lens.max()))
    longest, aligned = int(max_lens.max()), config.alignment
    batch = RunningBatch(model, memory, src_mask, use_cache, rules, prefix, longest, aligned)
    running = torch.arange(src_ids.size(0), device=src_ids.device)  # sentence of each row (N,)
    log_prob = torch.zeros(src_ids.size(0), device=src_ids.device)  # (N,)
    results: dict[int, Hypothesis] = {}
    # rows whose sentence has finished but that stay in the batch (idle) until the rest fit a
    # smaller size (``rows_that_stay``): their next tokens are made and not used. An idle row leaves
    # at its own length limit: no sentence makes more steps than the L + 1 that cost.py counts.
    idle = torch.zeros(src_ids.size(0), dtype=torch.bool, device=src_ids.device)  # (N,)
    some_idle = False
    for step in range(int(max_lens.max()) + 1):
        at_limit = max_lens[running] <= step  # (N,) their last step
        next_tokens, next_log_prob = choose(batch, at_limit, running)  # (N,), (N,)
        log_prob = log_prob + next_log_prob
        done = next_tokens == EOS_ID  # (N,)
        left = stopped_rows(stopped, running)  # (N,) nobody waits for these any more
        if left is not None and left.any():
            log_prob = log_prob.masked_fill(left, float("-inf"))  # unfinished: no score
            done = done | left
        if some_idle:
            done = done & ~idle
        if done.any() or some_idle and bool((idle & at_limit).any()):
            rows = done.nonzero().squeeze(1)
            tokens = batch.tokens[rows, 1:].tolist()  # drop BOS; EOS was never appended
            totals, attention = log_prob[rows].tolist(), batch.attention_of(rows.tolist())
            for row, ids, total, kept in zip(rows.tolist(), tokens, totals, attention, strict=True):
                results[int(running[row])] = Hypothesis(ids, score=total, log_prob=total,
                                                        attention=kept)  # fmt: skip
            idle = idle | done
            rest, live = rows_that_stay(idle, at_limit, keep_finished)
            if live == 0:
                break
            if rest is not None:
                batch.select(rest, rest)
                running, log_prob, next_tokens = running[rest], log_prob[rest], next_tokens[rest]
                idle = idle[rest]
            some_idle = idle.numel() > live
        batch.append(next_tokens)
    return [results[i] for i in range(src_ids.size(0))]  # EOS is forced at the limit


def greedy_search(
    model: EncoderDecoder,
    src_ids: Tensor,
    config: DecodeConfig = DecodeConfig(),  # noqa: B008 (frozen, so sharing it is safe)
    use_cache: bool = True,
    prefix: Tensor | None = None,
    stopped: Stopped | None = None,
) -> list[Hypothesis]:
    """The most likely next token at every step, until EOS.

    Args:
        model: the Transformer or the RNN encoder-decoder.
        src_ids: source ids (B, S), right-padded with PAD_ID.
        config: ``max_len_a`` and ``max_len_b`` (at most floor(a · src_len + b) tokens before
            EOS), ``min_len``, ``no_repeat_ngram`` and ``repetition_penalty`` are used.
        use_cache: decode incrementally with the key/value cache (False: re-run the prefix).
        prefix: (B, P) target ids each output must start with, right-padded with PAD_ID; the
            search continues from them, and their log-probabilities count in the score.
        stopped: whether nobody waits for sentence i any more (it ends at the next step).
    Shape:
        returns B hypotheses, in the order of src_ids; score = log_prob.
    """
    with evaluating(model):
        return _search_one_path(
            model, src_ids, _most_likely, config, use_cache, prefix, stopped, keep_finished=True
        )


def _most_likely(batch: RunningBatch, at_limit: Tensor, _: Tensor) -> tuple[Tensor, Tensor]:
    """Greedy search's choice: each row's most likely next token (the first of equals)."""
    found = batch.next_best(1, at_limit)  # (N, 1) each
    return found.tokens[:, 0], found.log_probs[:, 0]


def sample(
    model: EncoderDecoder,
    src_ids: Tensor,
    config: DecodeConfig = DecodeConfig(sampling=True),  # noqa: B008 (frozen)
    sample_of: Sequence[int] | None = None,
    use_cache: bool = True,
    prefix: Tensor | None = None,
    stopped: Stopped | None = None,
) -> list[Hypothesis]:
    """Draws each next token from the model's distribution, sharpened or flattened.

    The token is drawn from softmax(log p / temperature) restricted to the ``top_k`` most likely
    tokens, then to the nucleus of probability ``top_p``; temperature < 1 moves towards greedy
    search, > 1 towards uniform.

    Args:
        config: ``temperature`` (> 0), ``top_k`` (0: the whole vocabulary), ``top_p`` (1: no
            nucleus), ``sampling_seed`` and the rules ``greedy_search`` uses.
        sample_of: which of its sentence's samples each row is, for its seed (``row_seeds``;
            None: the first of each). With ``config.sampling_seed`` -1 the numbers come from
            torch's global generator instead.
        Others as in ``greedy_search``.
    Shape:
        returns B hypotheses; log_prob (= score) is under the model (with the rules of
        ``constraints.py``), not the temperature-scaled or truncated distribution.
    """
    temperature, top_k, top_p = config.temperature, config.top_k, config.top_p
    seed = config.sampling_seed
    seeds = row_seeds(seed, src_ids, prefix, sample_of) if seed >= 0 else None
    room = room_needed(config.min_len, prefix)
    max_lens = max_output_lengths(model, src_ids, config.max_len_a, config.max_len_b, room)  # (B,)
    uniforms = draws(max_lens, seeds, src_ids.device)  # (B, L + 1): row b's number at step t

    def draw(batch: RunningBatch, at_limit: Tensor, running: Tensor) -> tuple[Tensor, Tensor]:
        log_probs = batch.next_log_probs()  # (N, V)
        force_eos(log_probs, at_limit)
        scaled = log_probs / temperature  # (N, V)
        if top_k:
            kth_best = scaled.topk(min(top_k, scaled.size(-1)), dim=-1).values[:, -1:]  # (N, 1)
            scaled = scaled.masked_fill(scaled < kth_best, float("-inf"))
        probs = nucleus(scaled, top_p).softmax(dim=-1)  # (N, V)
        token = draw_tokens(probs, uniforms[running, batch.tokens.size(1) - 1])  # (N,)
        return token, log_probs.gather(1, token.unsqueeze(1)).squeeze(1)

    with evaluating(model):
        return _search_one_path(model, src_ids, draw, config, use_cache, prefix, stopped)


def draw_tokens(probs: Tensor, u: Tensor) -> Tensor:
    """One token per row drawn from ``probs`` (N, V) by its uniform number ``u`` (N,) in (0, 1]:
    the first token whose cumulative probability reaches u times the row's total. Each token is
    drawn for a share of (0, 1] equal to its probability, and a token of probability 0 never
    is (its cumulative probability equals the one before it). (N,)."""
    cumulative = probs.cumsum(dim=-1, dtype=torch.float32)  # (N, V)
    reach = u * cumulative[:, -1]  # (N,) in (0, total]
    return (cumulative < reach.unsqueeze(1)).sum(dim=1)  # (N,) tokens below the mark


def draws(limits: Tensor, seeds: Sequence[int] | None, device: torch.device) -> Tensor:
    """The uniform numbers in (0, 1] of the rows' steps, (B, L + 1) for the longest limit L:
    row b's first ``limits[b] + 1`` from its own generator seeded ``seeds[b]`` (the steps it
    can take), or all from torch's global generator without seeds."""
    steps = int(limits.max()) + 1 if limits.numel() else 1
    if seeds is None:
        return 1.0 - torch.rand(limits.size(0), steps, device=device)  # (B, L + 1)
    table = torch.ones(len(seeds), steps)  # (B, L + 1)
    for b, (seed, limit) in enumerate(zip(seeds, limits.tolist(), strict=True)):
        table[b, : limit + 1] -= torch.rand(
            limit + 1, generator=torch.Generator().manual_seed(seed)
        )
    return table.to(device)


def row_seeds(
    seed: int, src_ids: Tensor, prefix: Tensor | None = None, sample_of: Sequence[int] | None = None
) -> list[int]:
    """Each row's generator seed: a hash of ``seed``, the row's source ids and prefix ids (PAD
    left out) and ``sample_of[b]``, which of its sentence's samples row b is (None: the first
    of each). Two rows of the same sentence and sample get the same seed wherever they are."""
    rows = src_ids.tolist()
    prefixes = prefix.tolist() if prefix is not None else [[] for _ in rows]
    which = sample_of if sample_of is not None else [0] * len(rows)
    seeds = []
    for source, start, k in zip(rows, prefixes, which, strict=True):
        ids = [seed, k, *(t for t in source if t != PAD_ID), -1, *(t for t in start if t != PAD_ID)]
        digest = hashlib.blake2b(repr(ids).encode(), digest_size=8).digest()
        seeds.append(int.from_bytes(digest, "little"))
    return seeds
