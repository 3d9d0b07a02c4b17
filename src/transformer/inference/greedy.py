"""Greedy search and sampling: one hypothesis per sentence, one token per step.

Greedy search takes the most likely next token; sampling draws it from the model's distribution,
sharpened or flattened by a temperature and cut to the top k (Fan et al. 2018) or to the
nucleus of probability p (Holtzman et al. 2020). Both stop a sentence at EOS and follow the
shared rules of ``search.py`` and ``constraints.py`` (a forced prefix, a minimum length, n-gram
and repetition controls).

Shapes: B batch, S source length, N sentences still running, V target vocabulary.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from ..config import DecodeConfig
from ..model.base import EncoderDecoder
from ..vocab import EOS_ID
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

# (the running batch, its rows at their length limit (N,)) -> each row's next token and its
# log-probability, (N,) and (N,)
Choose = Callable[[RunningBatch, Tensor], tuple[Tensor, Tensor]]


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
    batch = RunningBatch(model, memory, src_mask, use_cache, rules, prefix, int(max_lens.max()))
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
        next_tokens, next_log_prob = choose(batch, at_limit)  # (N,), (N,)
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
            totals = log_prob[rows].tolist()
            for row, ids, total in zip(rows.tolist(), tokens, totals, strict=True):
                results[int(running[row])] = Hypothesis(ids, score=total, log_prob=total)
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


def _most_likely(batch: RunningBatch, at_limit: Tensor) -> tuple[Tensor, Tensor]:
    """Greedy search's choice: each row's most likely next token (the first of equals)."""
    found = batch.next_best(1, at_limit)  # (N, 1) each
    return found.tokens[:, 0], found.log_probs[:, 0]


def sample(
    model: EncoderDecoder,
    src_ids: Tensor,
    config: DecodeConfig = DecodeConfig(sampling=True),  # noqa: B008 (frozen)
    generator: torch.Generator | None = None,
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
            nucleus) and the rules ``greedy_search`` uses.
        generator: a seeded ``torch.Generator`` makes the samples reproducible.
        Others as in ``greedy_search``.
    Shape:
        returns B hypotheses; log_prob (= score) is under the model (with the rules of
        ``constraints.py``), not the temperature-scaled or truncated distribution.
    """
    temperature, top_k, top_p = config.temperature, config.top_k, config.top_p

    def draw(batch: RunningBatch, at_limit: Tensor) -> tuple[Tensor, Tensor]:
        log_probs = batch.next_log_probs()  # (N, V)
        force_eos(log_probs, at_limit)
        scaled = log_probs / temperature  # (N, V)
        if top_k:
            kth_best = scaled.topk(min(top_k, scaled.size(-1)), dim=-1).values[:, -1:]  # (N, 1)
            scaled = scaled.masked_fill(scaled < kth_best, float("-inf"))
        probs = nucleus(scaled, top_p).softmax(dim=-1)
        token = torch.multinomial(probs, 1, generator=generator)  # (N, 1)
        return token.squeeze(1), log_probs.gather(1, token).squeeze(1)

    with evaluating(model):
        return _search_one_path(model, src_ids, draw, config, use_cache, prefix, stopped)
