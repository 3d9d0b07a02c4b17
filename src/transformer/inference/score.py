"""Scoring given translations: the teacher-forced log-probability of each (source, target) pair.

log P(y | x) = Σ_t log P(y_t | x, y_<t), summed over the target's pieces and its EOS, from one
teacher-forced forward pass (the decoder reads <s> y1 .. yn and scores y1 .. yn </s> at once),
under the model itself: nothing is banned or penalised, as in fairseq's ``--score-reference``,
``marian-scorer`` and CTranslate2's ``score_batch`` (which the ctranslate2 engine uses).

Each pair gets three numbers: the total log-probability, the total per target token (EOS
counted), and the total divided by the GNMT length penalty ((5 + n) / 6)^α (the score beam search
ranks by, ``search.py``), so that scoring a beam's hypothesis gives back the score it reported.
People use them to filter parallel data, rerank n-best lists and check a model; per sentence,
the per-token number is the loss the model was trained on (without label smoothing).

Text handling is ``translate_with``'s: a source longer than the model's positions is cut to fit
and reported; a target is never cut (its score would be of another sentence): one that does not
fit is an error naming it.

Shapes: B pairs, S source length, T target length + 1, V target vocabulary.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from ..data.batching import encode_source, length_batches, pad
from ..data.tokenizer import Tokenizers
from ..errors import UserError
from ..model.base import EncoderDecoder
from ..vocab import BOS_ID, EOS_ID, PAD_ID
from .inputs import check_ids, check_texts
from .search import check_scores, evaluating, gnmt_length_penalty

# (source ids (pieces + EOS), target ids (pieces)) -> log P(target + EOS | source) per pair
ScoreIds = Callable[[list[list[int]], list[list[int]]], list[float]]


@dataclass
class PairScore:
    """How likely the model finds one target given its source."""

    log_prob: float  # log P(target pieces + EOS | source)
    tokens: int  # target pieces + EOS
    per_token: float  # log_prob / tokens
    penalised: float  # log_prob / ((5 + tokens) / 6)^α: the score beam search ranks by


@dataclass
class ScoreResult:
    scores: list[PairScore]  # one per pair, in order
    truncated: list[int]  # indices of the pairs whose source was cut to fit the model


def score_ids(
    model: EncoderDecoder,
    sources: list[list[int]],
    targets: list[list[int]],
    max_tokens: int = 8192,
    batch_size: int = 64,
) -> list[float]:
    """log P(target + EOS | source) of each pair, teacher-forced, in batches of similar length.

    Args:
        model: the Transformer or the RNN encoder-decoder.
        sources: source ids as the encoder reads them (pieces + EOS); targets: target pieces
            (no BOS, no EOS).
        max_tokens, batch_size: bound each batch's padded source + target positions and pairs.
    Shape:
        returns one float per pair, in order.
    """
    check_ids(sources, model.config.src_vocab_size, "source sentence")
    check_ids(targets, model.config.tgt_vocab_size, "target sentence")
    found: dict[int, float] = {}
    for indices, picked, gold in teacher_forced(model, sources, targets, max_tokens, batch_size):
        totals = picked.masked_fill(gold == PAD_ID, 0.0).sum(dim=1)  # (B,)
        found.update(zip(indices, totals.tolist(), strict=True))
    return [found[i] for i in range(len(sources))]


def teacher_forced(
    model: EncoderDecoder,
    sources: list[list[int]],
    targets: list[list[int]],
    max_tokens: int,
    batch_size: int,
) -> Iterator[tuple[list[int], Tensor, Tensor]]:
    """Per batch of similar lengths: the pairs' indices, each gold token's log-probability
    (B, T) and the gold tokens (B, T, PAD_ID past each target's EOS); non-finite scores are
    refused (``check_scores``)."""
    device = next(iter(model.parameters()), torch.empty(0)).device
    src_len = [len(s) for s in sources]
    tgt_len = [len(t) + 1 for t in targets]
    order = np.lexsort((tgt_len, src_len))  # by source, then target length: little padding
    with evaluating(model):
        for batch in length_batches(src_len, tgt_len, order, max_tokens, batch_size):
            indices = batch.tolist()
            src = pad([sources[i] for i in indices], device)  # (B, S)
            tgt_in = pad([[BOS_ID, *targets[i]] for i in indices], device)  # (B, T)
            gold = pad([[*targets[i], EOS_ID] for i in indices], device)  # (B, T)
            memory, src_mask = model.encode(src)
            logits = model.decode(tgt_in, memory, src_mask)  # (B, T, V)
            log_probs = model.log_probs(logits)  # (B, T, V)
            check_scores(model, log_probs, logits, memory, None)
            yield indices, log_probs.gather(2, gold[:, :, None]).squeeze(2), gold  # (B, T)


class TargetTooLong(UserError):
    """A target with more pieces than the model scores; ``index`` counts from 0. Where the
    targets came from names it: a file's line, a request's ``targets.i``."""

    def __init__(self, index: int, pieces: int, most: int, where: str = "") -> None:
        where = where or f"target {index + 1}"
        super().__init__(f"{where} has {pieces} pieces; the model scores at most {most} (its "
                         "positions, less one for <s>)")  # fmt: skip
        self.index, self.pieces, self.most = index, pieces, most

    @staticmethod
    def check(index: int, pieces: int, max_positions: int, where: str = "") -> None:
        """Raises for a target of ``pieces`` pieces that a model of ``max_positions`` positions
        cannot score (it needs one more, for <s>)."""
        if pieces > max_positions - 1:
            raise TargetTooLong(index, pieces, max_positions - 1, where)

    def at(self, where: str) -> TargetTooLong:
        """The same error, naming the target ``where``."""
        return TargetTooLong(self.index, self.pieces, self.most, where)


def score_with(
    score: ScoreIds,
    tokenizers: Tokenizers,
    sources: list[str],
    targets: list[str],
    max_positions: int,
    length_penalty: float,
) -> ScoreResult:
    """Text in, scores out around any engine's ``score`` (source ids, target ids -> log P).

    Args:
        sources, targets: the pairs, line-aligned (an empty target scores EOS alone).
        max_positions: the model's positions: a source is cut to fit (and reported), a target
            with more than max_positions - 1 pieces is an error.
        length_penalty: GNMT α for ``PairScore.penalised``.
    """
    check_texts(sources, "sources")
    check_texts(targets, "targets")
    if len(sources) != len(targets):
        raise UserError(f"{len(sources)} sources but {len(targets)} targets; give one target per "
                        "source")  # fmt: skip
    src_ids, tgt_ids, truncated = [], [], []
    for i, (source, target) in enumerate(zip(sources, targets, strict=True)):
        pieces = encode_source(tokenizers.src.encode(source))
        if len(pieces) > max_positions:
            pieces = [*pieces[: max_positions - 1], pieces[-1]]  # keep the EOS
            truncated.append(i)
        gold = tokenizers.tgt.encode(target)
        TargetTooLong.check(i, len(gold), max_positions)
        src_ids.append(pieces)
        tgt_ids.append(gold)
    totals = score(src_ids, tgt_ids) if src_ids else []
    scores = []
    for gold, total in zip(tgt_ids, totals, strict=True):
        n = len(gold) + 1
        penalty = gnmt_length_penalty(n, length_penalty)
        scores.append(PairScore(total, n, total / n, total / penalty))
    return ScoreResult(scores, truncated)
