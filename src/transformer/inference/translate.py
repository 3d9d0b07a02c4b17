"""Text in, text out: batching, the choice of search, and the tokenizers, for translate,
evaluate, validate and attention.

``translate_ids`` sorts sentences by length, cuts them into batches (``in_length_batches``,
``data/batching.py``) and sends each batch to the search the DecodeConfig asks for
(``search``): greedy, sampling or beam.

Source sentences become SentencePiece ids followed by EOS; a sentence longer than the model's
positions allow (``max_positions`` tokens) is truncated to fit, and the caller is told which
lines were, so the command line can warn: never a silent change, never a crash mid-file.
Empty sentences translate to empty strings without running the model. ``translate_with`` does
this around any engine's search (ours, or CTranslate2's in ``export/engine.py``), so every
engine treats lines alike. Every layer passes on ``stopped`` (search.py), so that a server stops
decoding the sentences of a client that left: a batch of them only is not decoded at all.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor, nn

from ..config import DecodeConfig
from ..data.batching import encode_source, length_batches, pad
from ..data.tokenizer import Tokenizers
from ..model.transformer import Transformer
from ..vocab import PAD_ID
from .beam import beam_search
from .greedy import greedy_search, sample
from .search import Hypothesis, Stopped, within

# (source ids, which of them nobody waits for any more) -> hypotheses per sentence
SearchIds = Callable[[list[list[int]], Stopped | None], list[list[Hypothesis]]]


def translate_ids(
    model: nn.Module,
    sentences: list[list[int]],
    config: DecodeConfig,
    use_cache: bool = True,
    generator: torch.Generator | None = None,
    stopped: Stopped | None = None,
) -> list[list[Hypothesis]]:
    """Decodes many source sentences, in batches of similar length, as ``config`` says.

    Sampling if ``config.sampling`` (``nbest`` samples per sentence), else greedy search if
    ``beam_size`` is 1, else beam search.

    Args:
        sentences: source ids exactly as the encoder saw them in training (the data pipeline
            encodes pieces + EOS); nothing is added or removed here. May be empty; no PAD_ID.
        config: the search and its limits: at most ``batch_size`` sentences and
            ``max_source_tokens`` padded source tokens per batch (a longer sentence goes alone).
        generator: the random source for sampling.
        stopped: whether nobody waits for sentence i any more (search.py): it ends early.
    Shape:
        returns one list of up to ``nbest`` hypotheses per sentence, best score first.
    """
    device = next(iter(model.parameters()), torch.empty(0)).device  # CPU for a parameterless stub

    def run(batch: list[list[int]], left: Stopped | None) -> list[list[Hypothesis]]:
        return search(model, pad(batch, device), config, use_cache, generator, left)  # (B, S)

    return in_length_batches(sentences, config, run, stopped)


def check_no_padding(sentences: list[list[int]]) -> None:
    """Source ids go to a search unpadded: a PAD_ID among them is a bug of the caller."""
    for i, ids in enumerate(sentences):
        if PAD_ID in ids:
            raise ValueError(f"source sentence {i} contains the padding id {PAD_ID}")


def in_length_batches(
    sentences: list[list[int]], config: DecodeConfig, run: SearchIds, stopped: Stopped | None = None
) -> list[list[Hypothesis]]:
    """Runs ``run`` on batches of sentences of similar length; results in input order.

    Sorting by length keeps padding, and so wasted work, small. Every engine batches this way.

    Args:
        sentences: source ids (pieces + EOS), no PAD_ID.
        config: ``batch_size`` and ``max_source_tokens`` bound each batch.
        run: decodes one batch (a list of source id lists) into hypotheses per sentence.
        stopped: whether nobody waits for sentence i any more; such a sentence gets no
            hypotheses, and is not decoded at all if it is stopped before its batch starts.
    """
    check_no_padding(sentences)
    lengths = [len(ids) for ids in sentences]
    widths = [max(n, 1) for n in lengths]  # an empty source still takes a column
    order = np.argsort(lengths, kind="stable")
    results: dict[int, list[Hypothesis]] = {}
    batches = length_batches(widths, None, order, config.max_source_tokens, config.batch_size)
    for indices in (batch.tolist() for batch in batches):
        if stopped is not None:
            indices = [i for i in indices if not stopped(i)]
        if indices:
            found = run([sentences[i] for i in indices], within(stopped, indices))
            results.update(zip(indices, found, strict=True))
    return [results.get(i, []) for i in range(len(sentences))]


def search(
    model: nn.Module,
    src_ids: Tensor,
    config: DecodeConfig,
    use_cache: bool = True,
    generator: torch.Generator | None = None,
    stopped: Stopped | None = None,
) -> list[list[Hypothesis]]:
    """One batch (B, S) through the search that the config asks for: sampling (``nbest``
    samples per sentence), greedy search (``beam_size`` 1) or beam search."""
    if config.sampling:
        n = config.nbest
        repeated = src_ids.repeat_interleave(n, dim=0)  # (B·n, S): n samples per sentence
        per_row = within(stopped, [r // n for r in range(repeated.size(0))])
        drawn = sample(model, repeated, config, generator, use_cache, per_row)
        return [sorted(drawn[i : i + n], key=lambda h: -h.score) for i in range(0, len(drawn), n)]
    if config.beam_size == 1:
        return [[hyp] for hyp in greedy_search(model, src_ids, config, use_cache, stopped)]
    return beam_search(model, src_ids, config, use_cache, stopped)


@dataclass
class Translation:
    text: str
    score: float  # length-penalised log-probability (beam) or log-probability (greedy, sampling)
    tokens: list[int]


@dataclass
class TranslationResult:
    nbest: list[list[Translation]]  # per input sentence, best first
    truncated: list[int]  # indices of the inputs that were cut to fit the model

    @property
    def best(self) -> list[str]:
        return [options[0].text if options else "" for options in self.nbest]


def translate(
    model: Transformer,
    tokenizers: Tokenizers,
    sentences: list[str],
    decode: DecodeConfig,
    stopped: Stopped | None = None,
) -> TranslationResult:
    """Translates ``sentences`` (any number; batched by length inside) with the torch model;
    ``stopped(i)``: nobody waits for sentence i any more (its translation is cut short)."""

    def search_ids(ids: list[list[int]], left: Stopped | None) -> list[list[Hypothesis]]:
        return translate_ids(model, ids, decode, stopped=left)

    return translate_with(search_ids, tokenizers, sentences, model.config.max_positions, stopped)


def translate_with(
    search_ids: SearchIds,
    tokenizers: Tokenizers,
    sentences: list[str],
    max_positions: int,
    stopped: Stopped | None = None,
) -> TranslationResult:
    """Text in, text out around any engine's ``search_ids`` (source ids -> hypotheses).

    Empty sentences translate to "" without running the engine; a sentence longer than
    ``max_positions`` tokens (pieces + EOS) is cut to fit, keeping its EOS, and reported in
    ``truncated``. Every engine goes through here, so they treat lines alike.
    """
    todo, ids, truncated = [], [], []
    for i, sentence in enumerate(sentences):
        if not sentence.strip():
            continue
        pieces = encode_source(tokenizers.src.encode(sentence))
        if len(pieces) > max_positions:
            pieces = [*pieces[: max_positions - 1], pieces[-1]]  # keep the EOS
            truncated.append(i)
        todo.append(i)
        ids.append(pieces)
    nbest: list[list[Translation]] = [[Translation("", 0.0, [])] for _ in sentences]
    if ids:
        for i, hypotheses in zip(todo, search_ids(ids, within(stopped, todo)), strict=True):
            nbest[i] = [
                Translation(tokenizers.tgt.decode(h.tokens), h.score, h.tokens) for h in hypotheses
            ]
    return TranslationResult(nbest, truncated)
