"""Decoding: turning a trained model into translations, one target token at a time.

Every search runs the encoder once, then the decoder step by step: at step t the decoder reads
<s> y1 .. yt and scores the next token. With ``use_cache=True`` (the default) only the new token
goes through the decoder and the keys/values of earlier steps come from a ``DecoderCache``
(``cache.py``); with ``use_cache=False`` the whole prefix is re-run at every step, the slow way,
kept to check that the cache changes nothing.

Shared rules of every search:
- a sentence may produce at most ``max_len_a · src_len + b`` tokens (src_len counts its real,
  non-pad source tokens), then EOS is forced, so every hypothesis ends with EOS;
- PAD and BOS are never generated;
- a sentence that has finished leaves the running batch (``cache.keep``), so later steps only
  pay for the sentences still being decoded;
- the model runs under ``torch.inference_mode()`` in eval mode; its train/eval mode is restored.

The searches use only ``model.encode``, ``model.decode``, ``model.new_cache`` and
``model.log_probs`` (plus ``model.config.max_positions`` when present), so any object with those
methods can be searched, e.g. a stub with hand-set distributions in the tests.

Shapes: B batch, S source length, t target steps so far, K beams, N sentences still running,
V target vocabulary.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from .config import BOS_ID, EOS_ID, PAD_ID, DecodeConfig


@dataclass
class Hypothesis:
    """One output sentence."""

    tokens: list[int]  # generated ids, without BOS and without the final EOS
    score: float  # beam search: log_prob / lp(len(tokens) + 1); greedy and sampling: log_prob
    log_prob: float  # log P(tokens + EOS | source) under the model


def gnmt_length_penalty(length: int | Tensor, alpha: float) -> float | Tensor:
    """lp(Y) = ((5 + |Y|) / 6)^α (Wu et al. 2016, §7); α = 0 gives 1, i.e. no penalty.

    Beam search ranks hypotheses by log P(Y|X) / lp(Y): without it, shorter outputs win simply
    because every extra token multiplies in one more probability below 1.
    """
    return ((5 + length) / 6) ** alpha


@contextmanager
def evaluating(model: nn.Module) -> Iterator[None]:
    """eval() + inference_mode for the search; every module's train/eval flag is restored."""
    modes = [(module, module.training) for module in model.modules()]
    model.eval()
    try:
        with torch.inference_mode():
            yield
    finally:
        for module, training in modes:
            module.training = training


def max_output_lengths(model: nn.Module, src_ids: Tensor, a: float, b: int) -> Tensor:
    """Most tokens (before EOS) each sentence may produce: floor(a · src_len + b), (B,).

    Capped so that the decoder input <s> y1 .. y_max fits in the model's positions.
    """
    src_len = (src_ids != PAD_ID).sum(dim=1)  # (B,)
    lengths = (a * src_len + b).floor().long()
    max_positions = getattr(getattr(model, "config", None), "max_positions", None)
    if max_positions is not None:
        lengths = lengths.clamp(max=max_positions - 1)
    return lengths


def force_eos(log_probs: Tensor, at_limit: Tensor) -> None:
    """Rows at their length limit may only produce EOS (at the model's own log-probability)."""
    not_eos = torch.ones(log_probs.size(-1), dtype=torch.bool, device=log_probs.device)
    not_eos[EOS_ID] = False
    log_probs.masked_fill_(at_limit[:, None] & not_eos, float("-inf"))


class RunningBatch:
    """The rows being decoded: their decoder inputs so far and what decoding them needs."""

    def __init__(self, model: nn.Module, memory: Tensor, src_mask: Tensor, use_cache: bool):
        self.model = model
        self.memory, self.src_mask = memory, src_mask  # (rows, S, D), (rows, 1, 1, S)
        self.cache = model.new_cache() if use_cache else None
        self.tokens = torch.full((memory.size(0), 1), BOS_ID, device=src_mask.device)  # (rows, 1)

    def next_log_probs(self) -> Tensor:
        """log P(next token | source, prefix) for every row, PAD and BOS banned: (rows, V)."""
        if self.cache is None:  # the whole prefix again
            logits = self.model.decode(self.tokens, self.memory, self.src_mask)  # (rows, t+1, V)
        else:  # only the newest token; earlier keys/values come from the cache
            new = self.tokens[:, -1:]  # (rows, 1)
            logits = self.model.decode(new, self.memory, self.src_mask, self.cache)
        log_probs = self.model.log_probs(logits[:, -1])  # (rows, V)
        log_probs[:, [PAD_ID, BOS_ID]] = float("-inf")
        return log_probs

    def append(self, next_tokens: Tensor) -> None:
        """Adds one token (rows,) to every prefix."""
        self.tokens = torch.cat([self.tokens, next_tokens[:, None]], dim=1)  # (rows, t+1)

    def select(self, rows: Tensor, same_sentences: bool) -> None:
        """Row i continues old row ``rows[i]``.

        ``same_sentences``: every row stays within its sentence (beam reordering), so the
        encoder output and the cached encoder-decoder keys/values need not move. Otherwise they
        move too (``cache.keep``): rows of finished sentences leave the batch.
        """
        self.tokens = self.tokens.index_select(0, rows)
        if same_sentences:
            if self.cache is not None:
                self.cache.reorder(rows)
            return
        self.memory = self.memory.index_select(0, rows)
        self.src_mask = self.src_mask.index_select(0, rows)
        if self.cache is not None:
            self.cache.keep(rows)


def _search_one_path(
    model: nn.Module,
    src_ids: Tensor,
    pick: Callable[[Tensor], Tensor],
    max_len_a: float,
    max_len_b: int,
    use_cache: bool,
) -> list[Hypothesis]:
    """Greedy search and sampling: one hypothesis per sentence, next token = pick(log_probs)."""
    if src_ids.size(0) == 0:
        return []
    memory, src_mask = model.encode(src_ids)
    max_lens = max_output_lengths(model, src_ids, max_len_a, max_len_b)  # (B,)
    batch = RunningBatch(model, memory, src_mask, use_cache)
    running = torch.arange(src_ids.size(0), device=src_ids.device)  # sentence of each row (N,)
    log_prob = torch.zeros(src_ids.size(0), device=src_ids.device)  # (N,)
    results: dict[int, Hypothesis] = {}
    for step in range(int(max_lens.max()) + 1):
        log_probs = batch.next_log_probs()  # (N, V)
        force_eos(log_probs, max_lens[running] <= step)
        next_tokens = pick(log_probs)  # (N,)
        log_prob = log_prob + log_probs.gather(1, next_tokens[:, None]).squeeze(1)
        done = next_tokens == EOS_ID  # (N,)
        if done.any():
            rows = done.nonzero().squeeze(1)
            tokens = batch.tokens[rows, 1:].tolist()  # drop BOS; EOS was never appended
            totals = log_prob[rows].tolist()
            for row, ids, total in zip(rows.tolist(), tokens, totals, strict=True):
                results[int(running[row])] = Hypothesis(ids, score=total, log_prob=total)
            rest = (~done).nonzero().squeeze(1)
            if rest.numel() == 0:
                break
            batch.select(rest, same_sentences=False)
            running, log_prob, next_tokens = running[rest], log_prob[rest], next_tokens[rest]
        batch.append(next_tokens)
    return [results[i] for i in range(src_ids.size(0))]  # EOS is forced at the limit


def greedy_search(
    model: nn.Module,
    src_ids: Tensor,
    max_len_a: float = 1.0,
    max_len_b: int = 50,
    use_cache: bool = True,
) -> list[Hypothesis]:
    """The most likely next token at every step, until EOS.

    Args:
        model: a ``Transformer`` (or anything with encode/decode/new_cache/log_probs).
        src_ids: source ids (B, S), right-padded with PAD_ID.
        max_len_a, max_len_b: at most floor(a · src_len + b) tokens before EOS.
        use_cache: decode incrementally with the key/value cache (False: re-run the prefix).
    Shape:
        returns B hypotheses, in the order of src_ids; score = log_prob.
    """
    with evaluating(model):
        return _search_one_path(
            model, src_ids, lambda lp: lp.argmax(dim=-1), max_len_a, max_len_b, use_cache
        )


def sample(
    model: nn.Module,
    src_ids: Tensor,
    temperature: float = 1.0,
    top_k: int = 0,
    max_len_a: float = 1.0,
    max_len_b: int = 50,
    generator: torch.Generator | None = None,
    use_cache: bool = True,
) -> list[Hypothesis]:
    """Draws each next token from the model's distribution, sharpened or flattened.

    The token is drawn from softmax(log p / temperature) restricted to the ``top_k`` most likely
    tokens (Fan et al. 2018); temperature < 1 moves towards greedy search, > 1 towards uniform.

    Args:
        temperature: > 0. top_k: 0 for the whole vocabulary.
        generator: a seeded ``torch.Generator`` makes the samples reproducible.
        Others as in ``greedy_search``.
    Shape:
        returns B hypotheses; log_prob (= score) is under the model itself, not the
        temperature-scaled or truncated distribution.
    """
    if temperature <= 0 or top_k < 0:
        raise ValueError(f"need temperature > 0 and top_k >= 0, got {temperature}, {top_k}")

    def pick(log_probs: Tensor) -> Tensor:
        scaled = log_probs / temperature  # (N, V)
        if top_k:
            kth_best = scaled.topk(min(top_k, scaled.size(-1)), dim=-1).values[:, -1:]  # (N, 1)
            scaled = scaled.masked_fill(scaled < kth_best, float("-inf"))
        probs = scaled.softmax(dim=-1)
        return torch.multinomial(probs, 1, generator=generator).squeeze(1)  # (N,)

    with evaluating(model):
        return _search_one_path(model, src_ids, pick, max_len_a, max_len_b, use_cache)


def translate_ids(
    model: nn.Module,
    sentences: list[list[int]],
    config: DecodeConfig,
    use_cache: bool = True,
    generator: torch.Generator | None = None,
) -> list[list[Hypothesis]]:
    """Decodes many source sentences, in batches of similar length, as ``config`` says.

    Sampling if ``config.sampling`` (``nbest`` samples per sentence), else greedy search if
    ``beam_size`` is 1, else beam search. Sorting by length keeps padding, and so wasted work,
    small; the results come back in input order.

    Args:
        sentences: source ids exactly as the encoder saw them in training (the data pipeline
            encodes pieces + EOS); nothing is added or removed here. May be empty; no PAD_ID.
        config: the search and its limits: at most ``batch_size`` sentences and
            ``max_source_tokens`` padded source tokens per batch (a longer sentence goes alone).
        generator: the random source for sampling.
    Shape:
        returns one list of up to ``nbest`` hypotheses per sentence, best score first.
    """
    for i, ids in enumerate(sentences):
        if PAD_ID in ids:
            raise ValueError(f"source sentence {i} contains the padding id {PAD_ID}")
    device = next(iter(model.parameters()), torch.empty(0)).device  # CPU for a parameterless stub
    results: dict[int, list[Hypothesis]] = {}
    for indices in _length_batches([len(ids) for ids in sentences], config):
        src_ids = _pad([sentences[i] for i in indices], device)  # (B, S)
        found = _search(model, src_ids, config, use_cache, generator)
        results.update(zip(indices, found, strict=True))
    return [results[i] for i in range(len(sentences))]


def _search(
    model: nn.Module,
    src_ids: Tensor,
    config: DecodeConfig,
    use_cache: bool,
    generator: torch.Generator | None,
) -> list[list[Hypothesis]]:
    """One batch through the search that the config asks for."""
    from .beam import beam_search  # beam.py builds on this module, so it is imported here

    a, b = config.max_len_a, config.max_len_b
    if config.sampling:
        n = config.nbest
        repeated = src_ids.repeat_interleave(n, dim=0)  # (B·n, S): n samples per sentence
        drawn = sample(
            model, repeated, config.temperature, config.top_k, a, b, generator, use_cache
        )
        return [sorted(drawn[i : i + n], key=lambda h: -h.score) for i in range(0, len(drawn), n)]
    if config.beam_size == 1:
        return [[hyp] for hyp in greedy_search(model, src_ids, a, b, use_cache)]
    K, alpha = config.beam_size, config.length_penalty
    return beam_search(model, src_ids, K, alpha, a, b, config.nbest, use_cache)


def _length_batches(lengths: list[int], config: DecodeConfig) -> list[list[int]]:
    """Sentence indices sorted by length and cut into batches within the config's limits."""
    batches: list[list[int]] = []
    current: list[int] = []
    for i in sorted(range(len(lengths)), key=lengths.__getitem__):
        width = max(lengths[i], 1)  # sorted, so the newest sentence is the longest
        if current and (
            len(current) == config.batch_size
            or (len(current) + 1) * width > config.max_source_tokens
        ):
            batches.append(current)
            current = []
        current.append(i)
    return [*batches, current] if current else batches


def _pad(sentences: list[list[int]], device: torch.device) -> Tensor:
    """Right-padded (B, S) ids; at least one column, so a batch of empty sentences works."""
    width = max(1, *(len(ids) for ids in sentences))
    src_ids = torch.full((len(sentences), width), PAD_ID, dtype=torch.long, device=device)
    for row, ids in enumerate(sentences):
        src_ids[row, : len(ids)] = torch.tensor(ids, dtype=torch.long)
    return src_ids
