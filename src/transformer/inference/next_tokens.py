"""The final linear layer and softmax, fused with a search's choice of the next tokens.

A search keeps only a few tokens per row at every step: greedy search the most likely one, beam
search the 2K best of each beam. The plain way to find them makes the logits of the whole
vocabulary (rows, V), then their log-softmax (rows, V), and in beam search the candidates'
totals (rows, V): at an OPUS-MT model's size (V = 58,101) and 256 rows, three new 60 MB
tensors at every step, and a matrix product whose output does not fit in any cache.

``best_next_tokens`` writes the logits into one buffer, ``SLICE`` words of the vocabulary per
product at least, more where the rows are few (``GROUP_BYTES`` of logits a product): while a
product's logits are in the cache, their log-normaliser and the maxima of their blocks of
``BLOCK`` words. Then

    log Σ_v exp(z_v) = log Σ_products exp(lse_product),     log P(v) = z_v − log Σ_v exp(z_v),

and the k best of the whole vocabulary lie in the k blocks with the highest maxima: only those
k · BLOCK logits are searched. A vocabulary of at most ``SLICE`` words is one product, and
there the numbers are exactly ``log_softmax`` and ``topk``'s; with more products they are the
same to float32 rounding, and the same tokens (tests/test_next_tokens.py). PAD and BOS are
banned after the normalisation, as ``RunningBatch.next_log_probs`` bans them.

Measured on this project's 2-core CPU (benchmarks/profile_decode.py, docs/speed.md): at
V = 58,101 slices of 1,024 words made this step 1.6–1.8× faster than the whole logits'
log_softmax and top-k (the final linear layer alone 1.7×). Searching blocks instead of a
``log_softmax`` and a ``topk`` per slice made it 1.04–1.41× faster again (one thread; V 8,000
to 58,101, 16 to 256 rows, k 1 and 8; the most with beam search's k = 8). Products sized by
their logits, not by words, made it 1.1–1.5× faster again where rows are few (V 8,000, 8 to 64
rows: greedy search's 64 sentences take the vocabulary in 2 products instead of 8; every
product writes straight into the buffer, the last, shorter one too) and left beam search's 256
rows as they were. The price is the buffer: float32 logits of the whole vocabulary, (rows, V),
made anew at each step: 8 MB for a beam of 4 over 64 sentences at V = 8,000, 60 MB at
V = 58,101 (peak memory of an OPUS-MT-sized beam search 602 → 662 MB).

Shapes: N rows, D model width, V target vocabulary, k tokens kept per row.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..model.linear import packed_product, packed_rows
from ..vocab import BOS_ID, EOS_ID, PAD_ID

SLICE = 1024  # vocabulary words per product at least: (256 rows × 1,024) float32 = 1 MB
GROUP_BYTES = 1 << 20  # a product's logits where rows are few: 1 MB, half a core's L2 here
BANNED = [PAD_ID, BOS_ID]  # never generated (search.py); both in the first BLOCK words
BLOCK = 64  # columns whose maximum ``best`` takes first
ROW_GROUP_BYTES = 8 << 20  # logits passed over at once where one product made them all


class Scratch:
    """Buffers that a search reuses from one step to the next, kept per running batch.

    A new float32 tensor of (rows, V) at every step is memory the C library hands back to the
    system when it is freed and maps afresh at the next step, and the first write to each of its
    pages faults: at 64 rows and V = 8,000 (2 MB) that first write, the bias copied into the
    logits, took 0.4-0.7 ms a product where the product itself took 1.5 ms (torch.profiler,
    docs/speed.md). A buffer kept for the batch is faulted in once.
    """

    def __init__(self) -> None:
        self._buffers: dict[str, Tensor] = {}

    def take(self, name: str, rows: int, columns: int, like: Tensor) -> Tensor:
        """A float32 (rows, columns) view of the buffer ``name``, on ``like``'s device; its
        contents are whatever the last step left."""
        kept = self._buffers.get(name)
        if (
            kept is None
            or kept.size(0) < rows
            or kept.size(1) != columns
            or kept.device != like.device
        ):
            kept = like.new_empty(rows, columns, dtype=torch.float)
            self._buffers[name] = kept
        return kept[:rows]


@dataclass
class NextTokens:
    """The k best next tokens of every row, best first, and what ``check_scores`` needs."""

    log_probs: Tensor  # (N, k) their log-probabilities under the model
    tokens: Tensor  # (N, k) their ids
    log_normaliser: Tensor  # (N,) log Σ_v exp(z_v): NaN or +inf when a logit is


def best_next_tokens(
    hidden: Tensor, output: nn.Module, k: int, at_limit: Tensor, scratch: Scratch | None = None
) -> NextTokens:
    """The k most likely next tokens of each row, PAD and BOS banned, EOS forced where a row is
    ``at_limit`` (its only token then, at its own log-probability; the other k − 1 are −inf).

    Args:
        hidden: the decoder's output for the newest position (N, D).
        output: the final linear layer (N, D) -> (N, V); any other module is applied whole.
        k: tokens per row, at most V − 2.
        at_limit: (N,) rows that must end now.
        scratch: the buffers to write the logits into (None: new ones); nothing returned
            points into them.
    Shape:
        returns NextTokens of (N, k), (N, k) and (N,).
    """
    if not isinstance(output, nn.Linear) or output.out_features <= SLICE:
        return _whole(output(hidden), k, at_limit)
    return _in_slices(hidden, output, k, at_limit, scratch or Scratch())


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


def _in_slices(
    hidden: Tensor, output: nn.Linear, k: int, at_limit: Tensor, scratch: Scratch
) -> NextTokens:
    """The logits written into one buffer (N, V'), V rounded up to whole blocks of ``BLOCK``
    words, by products of ``columns`` words: ``SLICE``, or more where the rows are few, as
    many as make ``GROUP_BYTES`` of logits. While a product's logits are in the cache, their
    log-normaliser and the maxima of their blocks. Then the k best of the whole vocabulary
    come from the k blocks with the highest maxima (``best``'s rule) and are turned into
    log-probabilities. The best are chosen among the logits, which do not depend on how the
    products are cut (ties go to the first, as ``argmax`` takes them). Per product: the
    block maxima, then the log-softmax kernel's passes for the normaliser (``_log_sum_exp``),
    where ``log_softmax`` and ``topk`` on every slice took 1.65 ms of a 16 ms greedy step (64
    rows, V 8,000, one thread). Where the output layer is packed (``runtime.pack_weights``), one
    product makes all the logits, and the same passes run over whole rows (``_over_rows``)."""
    weight, bias = output.weight, output.bias  # (V, D), (V,)
    V, N = output.out_features, hidden.size(0)
    width = -(-V // BLOCK) * BLOCK  # V'
    # all the logits in one product where the weight is packed for oneDNN with its rows padded
    # to whole blocks (model/linear.py); else products of slices written into the buffer
    whole = packed_rows(output) == width
    packed = packed_product(hidden, output) if whole else None  # (N, V') or None
    logits = scratch.take("logits", N, width, hidden) if packed is None else packed  # (N, V')
    if V % BLOCK:  # the last block's columns past V: chosen never
        logits[:, V:] = float("-inf")
    if packed is not None:  # all the logits made at once: whole rows, a group at a time
        log_normaliser, block_max = _over_rows(logits, scratch)  # (N,), (N, V' / BLOCK)
    else:
        columns = max(SLICE, GROUP_BYTES // (4 * N) // BLOCK * BLOCK)  # words per product
        # straight into the buffer where the product is float32 anyway (not under autocast) and
        # no gradient is asked for (a search runs in inference mode)
        direct = (hidden.dtype == torch.float and not torch.is_grad_enabled()
                  and not torch.is_autocast_enabled(hidden.device.type))  # fmt: skip
        # each product's log-softmax, in one buffer as big as the biggest product's: (N, C)
        buffer = (
            scratch.take("log_probs", N, min(columns, logits.size(1)), hidden) if direct else None
        )
        normalisers, maxima = [], []  # per product: (N,), (N, columns / BLOCK)
        for start in range(0, V, columns):
            words = slice(start, min(start + columns, V))  # this product's, into the buffer
            part = None if bias is None else bias[words]
            if direct:
                _linear_into(logits[:, words], hidden, weight[words], part)
            else:  # through a new tensor (autocast; gradients)
                logits[:, words] = F.linear(hidden, weight[words], part)
            z = logits[:, start : start + columns]  # (N, C) whole blocks, a view of the buffer
            # the buffer's first N·C numbers: a contiguous (N, C), as _log_sum_exp needs
            out = None if buffer is None else buffer.view(-1)[: z.numel()].view(z.shape)
            normaliser, block_max = _normalised(z, out)  # (N,), (N, C / BLOCK)
            normalisers.append(normaliser)
            maxima.append(block_max)
        # over the products: (N,) and (N, V' / BLOCK)
        log_normaliser = normalisers[0] if len(normalisers) == 1 else (
            torch.stack(normalisers, dim=1).logsumexp(dim=1))  # fmt: skip
        block_max = maxima[0] if len(maxima) == 1 else torch.cat(maxima, dim=1)
    # after the normaliser: PAD and BOS take their share of the probability
    eos = logits[:, EOS_ID].clone()  # (N,)
    logits[:, BANNED] = float("-inf")
    block_max[:, 0] = logits[:, :BLOCK].amax(dim=-1)  # the block of the banned words
    value, tokens = _best_of_blocks(logits, block_max, k)  # (N, k) each
    log_probs = value - log_normaliser[:, None]  # (N, k)
    if V % BLOCK:  # a -inf past V can be among the k when fewer than k logits are finite
        tokens = torch.where(tokens < V, tokens, PAD_ID)
    rows = at_limit.nonzero().squeeze(1)  # (R,)
    if rows.numel():  # EOS only, at its own log-probability
        log_probs[rows] = float("-inf")
        log_probs[rows, 0] = eos[rows] - log_normaliser[rows]
        tokens[rows, 0] = EOS_ID
    return NextTokens(log_probs, tokens, log_normaliser)


def _over_rows(logits: Tensor, scratch: Scratch) -> tuple[Tensor, Tensor]:
    """The log-normaliser (N,) and the maxima of the blocks (N, V' / BLOCK) of logits
    (N, V') made by one product, whole rows at a time, as many rows as make
    ``ROW_GROUP_BYTES`` (every row of Multi30k's 8,000 words at 256 rows; 36 rows of an
    OPUS-MT model's 58,101). A row group is contiguous, so the log-softmax kernel reads it
    without a copy, where a group of columns was a strided view that it copied first; and a
    row group is a few calls where groups of columns were many (docs/speed.md)."""
    N, width = logits.shape
    rows = max(1, min(N, ROW_GROUP_BYTES // (4 * width)))
    buffer = scratch.take("log_probs", rows, width, logits)  # (R, V')
    normalisers, maxima = [], []  # per group: (R,), (R, V' / BLOCK)
    for start in range(0, N, rows):
        z = logits[start : start + rows]  # (R, V')
        normaliser, block_max = _normalised(z, buffer[: z.size(0)])  # (R,), (R, V' / BLOCK)
        normalisers.append(normaliser)
        maxima.append(block_max)
    if len(normalisers) == 1:
        return normalisers[0], maxima[0]
    return torch.cat(normalisers), torch.cat(maxima)


def _normalised(z: Tensor, log_probs: Tensor | None) -> tuple[Tensor, Tensor]:
    """A group of logits (R, C), whole blocks: its log-normaliser (R,) (``_log_sum_exp``, the
    log-softmax written into ``log_probs``) and its blocks' maxima (R, C / BLOCK)."""
    block_max = z.unflatten(1, (-1, BLOCK)).amax(dim=-1)  # (R, C / BLOCK)
    top = block_max.amax(dim=-1, keepdim=True)  # (R, 1)
    return _log_sum_exp(z, top, log_probs), block_max


def _log_normaliser(logits: Tensor, log_probs: Tensor) -> Tensor:
    """log Σ exp(logits) per row (N,), from the log-softmax already made: the largest logit
    minus the largest log-probability (both at the same word, where the subtraction loses
    least). NaN where a logit is NaN or +inf, or where every logit is −inf (the log-softmax
    then is NaN). Maxima without their positions: ``amax`` is ten times faster than ``max``
    with indices on a CPU."""
    return logits.amax(dim=-1).float() - log_probs.amax(dim=-1)


def _linear_into(out: Tensor, x: Tensor, weight: Tensor, bias: Tensor | None) -> None:
    """out = x · weightᵀ + bias, written into ``out`` (N, C) without a new tensor."""
    if bias is None:
        torch.mm(x, weight.t(), out=out)
    else:
        torch.addmm(bias, x, weight.t(), out=out)


def _log_sum_exp(z: Tensor, top: Tensor, log_probs: Tensor | None) -> Tensor:
    """log Σ exp(z) per row of (N, C) given each row's largest logit ``top`` (N, 1): (N,). NaN
    where a logit is NaN or +inf, or where every logit is −inf.

    Through the log-softmax kernel, whose exponential is vectorised in one pass with the sum:
    on the AMD EPYC ``exp_`` alone over (64, 4,096) took 230 µs and the whole log-softmax
    162 µs (docs/speed.md). z's log-softmax is written into ``log_probs`` (N, C; None: a new
    tensor), which must be contiguous: given a strided ``out`` (a slice of columns), torch
    2.13's kernel wrote wrong numbers. The normaliser is then the largest logit minus the
    largest log-probability, as ``_log_normaliser`` takes it."""
    if log_probs is None:
        log_probs = torch.log_softmax(z, dim=-1)
    else:
        assert log_probs.is_contiguous()
        torch.ops.aten._log_softmax.out(z, -1, False, out=log_probs)
    return top.squeeze(1) - log_probs.amax(dim=-1)


def _best_of_blocks(scores: Tensor, maxima: Tensor, k: int) -> tuple[Tensor, Tensor]:
    """The k highest scores of each row of (N, C), C whole blocks of ``BLOCK`` columns, and
    their columns, best first, given the blocks' maxima (N, C / BLOCK): the k blocks with the
    highest maxima hold them (``best``)."""
    N, width = scores.shape
    if k * BLOCK >= width:  # as many columns as the blocks hold: all of them
        return _top(scores, k)
    chosen = _top(maxima, k)[1]  # (N, k) blocks
    if k > 1:
        chosen = chosen.sort(dim=-1).values  # in column order: ties go to the first column
    rows = torch.arange(N, device=scores.device)[:, None]  # (N, 1)
    candidates = scores.view(N, -1, BLOCK)[rows, chosen]  # (N, k, BLOCK)
    if k == 1:  # one block (greedy search): the best is its own column in it
        value, at = _top(candidates[:, 0], 1)  # (N, 1) each
        return value, chosen.mul_(BLOCK).add_(at)
    value, at = _top(candidates.view(N, k * BLOCK), k)  # (N, k): the at-th candidate
    return value, chosen.gather(1, at // BLOCK) * BLOCK + at % BLOCK


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
    maxima = padded.view(N, -1, BLOCK).amax(dim=-1)  # (N, C'/BLOCK)
    return _best_of_blocks(padded, maxima, k)


def _top(scores: Tensor, k: int) -> tuple[Tensor, Tensor]:
    """``topk``, or for k = 1 ``max`` (the first of equals, as ``argmax``): (N, k) each."""
    return scores.max(dim=-1, keepdim=True) if k == 1 else scores.topk(k, dim=-1)
