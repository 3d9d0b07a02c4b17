"""The final linear layer and softmax, fused with a search's choice of the next tokens.

A search keeps only a few tokens per row at every step: greedy search the most likely one, beam
search the 2K best of each beam. The plain way to find them makes the logits of the whole
vocabulary (rows, V), then their log-softmax (rows, V), and in beam search the candidates'
totals (rows, V): at an OPUS-MT model's size (V = 58,101) and 256 rows, three new 60 MB
tensors at every step, and a matrix product whose output does not fit in any cache.

``best_next_tokens`` takes the vocabulary a slice of ``SLICE`` words at a time: the slice's
logits, their log-normaliser (from their log-softmax) and their k best, while the slice is in
the cache; only (rows, k) numbers per slice are kept. Then

    log Σ_v exp(z_v) = log Σ_slices exp(lse_slice),     log P(v) = z_v − log Σ_v exp(z_v),

and the k best of the whole vocabulary are the best of the slices' k best. A vocabulary of at
most ``SLICE`` words is one slice, and there the numbers are exactly ``log_softmax`` and
``topk``'s; with more slices they are the same to float32 rounding, and the same tokens
(tests/test_next_tokens.py). PAD and BOS are banned after the normalisation, as
``RunningBatch.next_log_probs`` bans them.

Measured on this project's 2-core CPU (benchmarks/profile_decode.py, docs/speed.md): at
V = 58,101 this step is 1.6–1.8× faster than the whole logits' log_softmax and top-k (the final
linear layer alone 1.7×), and nothing of size (rows, V) is allocated any more.

Shapes: N rows, D model width, V target vocabulary, k tokens kept per row.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..vocab import BOS_ID, EOS_ID, PAD_ID

SLICE = 1024  # vocabulary words per product: (256 rows × 1,024) float32 logits = 1 MB
BANNED = [PAD_ID, BOS_ID]  # never generated (search.py)
BLOCK = 64  # columns whose maximum ``best`` takes first


@dataclass
class NextTokens:
    """The k best next tokens of every row, best first, and what ``check_scores`` needs."""

    log_probs: Tensor  # (N, k) their log-probabilities under the model
    tokens: Tensor  # (N, k) their ids
    log_normaliser: Tensor  # (N,) log Σ_v exp(z_v): NaN or +inf when a logit is


def best_next_tokens(hidden: Tensor, output: nn.Module, k: int, at_limit: Tensor) -> NextTokens:
    """The k most likely next tokens of each row, PAD and BOS banned, EOS forced where a row is
    ``at_limit`` (its only token then, at its own log-probability; the other k − 1 are −inf).

    Args:
        hidden: the decoder's output for the newest position (N, D).
        output: the final linear layer (N, D) -> (N, V); any other module is applied whole.
        k: tokens per row, at most V − 2.
        at_limit: (N,) rows that must end now.
    Shape:
        returns NextTokens of (N, k), (N, k) and (N,).
    """
    if not isinstance(output, nn.Linear) or output.out_features <= SLICE:
        return _whole(output(hidden), k, at_limit)
    return _in_slices(hidden, output, k, at_limit)


def _whole(logits: Tensor, k: int, at_limit: Tensor) -> NextTokens:
    """A small vocabulary's logits (N, V) at once: log_softmax, the bans, top-k."""
    log_probs = torch.log_softmax(logits.float(), dim=-1)  # (N, V)
    log_normaliser = _log_normaliser(logits, log_probs)  # (N,)
    log_probs[:, BANNED] = float("-inf")
    rows = at_limit.nonzero().squeeze(1)  # (R,)
    if rows.numel():  # EOS only, at its own log-probability
        eos = log_probs[rows, EOS_ID]
        log_probs[rows] = float("-inf")
        log_probs[rows, EOS_ID] = eos
    return NextTokens(*best(log_probs, k), log_normaliser)


def _in_slices(hidden: Tensor, output: nn.Linear, k: int, at_limit: Tensor) -> NextTokens:
    """The vocabulary ``SLICE`` words at a time: each slice's log-normaliser and k best logits.
    The best are chosen among the logits, which do not depend on the slicing (ties go to the
    first, as in one product), then turned into log-probabilities. A few operations a slice:
    each costs microseconds of the step whatever its size."""
    weight, bias = output.weight, output.bias  # (V, D), (V,)
    logits, ids, normalisers = [], [], []  # per slice: (N, ≤k), (N, ≤k), (N,)
    first: list[int] = []  # the first id of the slice each kept column comes from
    eos = None
    for start in range(0, output.out_features, SLICE):
        part = None if bias is None else bias[start : start + SLICE]
        z = F.linear(hidden, weight[start : start + SLICE], part)  # (N, C)
        normalisers.append(_log_normaliser(z, torch.log_softmax(z, dim=-1, dtype=torch.float)))
        if start == 0:
            eos = z[:, EOS_ID].float()  # (N,)
            z[:, BANNED] = float("-inf")
        value, token = _top(z, min(k, z.size(1)))  # (N, ≤k)
        logits.append(value)
        ids.append(token)
        first += [start] * token.size(1)
    assert eos is not None
    log_normaliser = torch.stack(normalisers, dim=1).logsumexp(dim=1)  # (N,) over the slices
    value, pick = best(torch.cat(logits, dim=1).float(), k)  # (N, k) the best of the slices' best
    log_probs = value - log_normaliser[:, None]  # (N, k)
    offset = torch.tensor(first, device=pick.device)[pick]  # (N, k) their slices' first ids
    tokens = torch.cat(ids, dim=1).gather(1, pick) + offset  # (N, k)
    rows = at_limit.nonzero().squeeze(1)  # (R,)
    if rows.numel():  # EOS only, at its own log-probability
        log_probs[rows] = float("-inf")
        log_probs[rows, 0] = eos[rows] - log_normaliser[rows]
        tokens[rows, 0] = EOS_ID
    return NextTokens(log_probs, tokens, log_normaliser)


def _log_normaliser(logits: Tensor, log_probs: Tensor) -> Tensor:
    """log Σ exp(logits) per row (N,), from the log-softmax already made: the largest logit
    minus the largest log-probability (both at the same word, where the subtraction loses
    least). NaN where a logit is NaN or +inf, or where every logit is −inf (the log-softmax
    then is NaN). Maxima without their positions: ``amax`` is ten times faster than ``max``
    with indices on a CPU."""
    return logits.amax(dim=-1).float() - log_probs.amax(dim=-1)


def best(scores: Tensor, k: int) -> tuple[Tensor, Tensor]:
    """The k highest scores of each row of (N, C) and their columns, best first: (N, min(k, C))
    each; for k = 1 the first of equal highest scores, as ``argmax`` picks it.

    In two stages, because on a CPU torch's ``topk`` and ``argmax`` take 1-2 ns an element and
    ``amax`` 0.1 ns: the maximum of every block of ``BLOCK`` columns, then the k blocks with
    the highest maxima, then the k best among their columns. The k best scores lie in those
    blocks: a score in any other block is beaten by the k chosen blocks' maxima.
    """
    N, width = scores.shape
    k = min(k, width)
    if width <= 4 * k * BLOCK:  # too few columns for the blocks to pay
        return _top(scores, k)
    padded = F.pad(scores, (0, -width % BLOCK), value=float("-inf"))  # (N, C') whole blocks
    blocks = padded.view(N, -1, BLOCK)  # (N, C'/BLOCK, BLOCK)
    chosen = _top(blocks.amax(dim=-1), k)[1].sort(dim=-1).values  # (N, k) in column order
    columns = chosen[:, :, None] * BLOCK + torch.arange(BLOCK, device=scores.device)  # (N, k, B)
    candidates = blocks.gather(1, chosen[:, :, None].expand(N, k, BLOCK))  # (N, k, BLOCK)
    value, at = _top(candidates.view(N, k * BLOCK), k)  # (N, k)
    return value, columns.view(N, k * BLOCK).gather(1, at)


def _top(scores: Tensor, k: int) -> tuple[Tensor, Tensor]:
    """``topk``, or for k = 1 ``max`` (the first of equals, as ``argmax``): (N, k) each."""
    return scores.max(dim=-1, keepdim=True) if k == 1 else scores.topk(k, dim=-1)
