"""How sure the model is of each word it wrote: per-word probabilities, and words flagged for
review.

The translation's pieces are scored teacher-forced, as ``score.py`` scores a given target: one
forward pass gives log P(y_t | x, y_<t) for each piece and for </s>, under the model itself
(nothing banned or penalised, so with a plain search their sum is the hypothesis' log-probability).
The torch engine scores with its model, CTranslate2 with ``score_batch``, whose ``log_probs``
are the same numbers per piece.

A word is what SentencePiece marks as one: a piece starting with "▁" and the pieces after it up
to the next such piece (``alignment.py`` groups pieces the same way). A word's probability is
the product of its pieces' (the chain rule: P(word) = Π P(piece | what came before)).
``flagged`` marks the words under a threshold as ``[[word]]`` in the text.

Shapes: B pairs, S source length, T target length + 1, V target vocabulary.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..data.batching import encode_source
from ..data.tokenizer import AnyTokenizer, Tokenizers
from ..errors import BadValue
from .score import teacher_forced

WORD_START = "\u2581"  # SentencePiece's "▁"
FLAG_OPEN, FLAG_CLOSE = "[[", "]]"


@dataclass
class Word:
    word: str  # as it reads in the translation
    prob: float  # P(its pieces | the source, the words before it)


@dataclass
class Confidence:
    log_prob: float  # log P(translation + </s> | source), teacher-forced
    words: list[Word]


def piece_log_probs(engine, sources: list[str], tokens: list[list[int]]) -> list[list[float]]:
    """log P of each target piece and of </s>, for each (source text, target ids) pair, by the
    engine's own model.

    Args:
        engine: a ``TorchEngine`` or ``CTranslate2Engine`` (engine.py, ctranslate2.py).
        sources: source sentences, as given to ``translate``; one longer than the model
            accepts is cut as ``translate_with`` cuts it.
        tokens: the translations' piece ids (``Translation.tokens``).
    Shape:
        returns per pair a list of len(tokens) + 1 floats.
    """
    limit = engine.config.model.max_positions
    batch = engine.decode.sentences_per_batch(engine.config.model, search=False)
    src = []
    for text in sources:
        ids = encode_source(engine.tokenizers.src.encode(text))
        src.append(ids if len(ids) <= limit else [*ids[: limit - 1], ids[-1]])
    if not src:
        return []
    if engine.name == "ctranslate2":
        source = [[engine.tokenizers.src.id_to_piece(i) for i in ids] for ids in src]
        target = [[engine.tokenizers.tgt.id_to_piece(i) for i in ids] for ids in tokens]
        found = engine.ct2.score_batch(source, target, max_batch_size=batch,
                                       max_input_length=0)  # fmt: skip
        return [list(r.log_probs) for r in found]
    with engine.precision():
        return _torch_piece_log_probs(engine.model, src, tokens, engine.decode.max_source_tokens,
                                      batch)  # fmt: skip


def _torch_piece_log_probs(
    model, sources: list[list[int]], targets: list[list[int]], max_tokens: int, batch_size: int
) -> list[list[float]]:
    """score.py's ``score_ids``, keeping each position's log-probability."""
    found: dict[int, list[float]] = {}
    for indices, picked, _ in teacher_forced(model, sources, targets, max_tokens, batch_size):
        picked = picked.float()  # (B, T)
        for row, i in enumerate(indices):
            found[i] = picked[row, : len(targets[i]) + 1].tolist()
    return [found[i] for i in range(len(sources))]


def words_of(tokens: list[int], log_probs: list[float], tokenizer: AnyTokenizer) -> list[Word]:
    """The translation's words, each with the product of its pieces' probabilities (</s>'s,
    the last of ``log_probs``, is no word's)."""
    groups: list[list[int]] = []
    for k, token in enumerate(tokens):
        if not groups or tokenizer.id_to_piece(token).startswith(WORD_START):
            groups.append([])
        groups[-1].append(k)
    words = []
    for group in groups:
        text = tokenizer.decode([tokens[k] for k in group]).strip()
        if text:
            words.append(Word(text, math.exp(sum(log_probs[k] for k in group))))
    return words


def confidences(
    engine, tokenizers: Tokenizers, sources: list[str], tokens: list[list[int]]
) -> list[Confidence]:
    """Per pair: the translation's log-probability and its words' probabilities."""
    # "" translates to "" and is not scored; an empty source with a prefix has words to score
    scored = [i for i, source in enumerate(sources) if source.strip() or tokens[i]]
    found = piece_log_probs(engine, [sources[i] for i in scored], [tokens[i] for i in scored])
    out = [Confidence(0.0, []) for _ in sources]
    for i, lps in zip(scored, found, strict=True):
        out[i] = Confidence(sum(lps), words_of(tokens[i], lps, tokenizers.tgt))
    return out


def check_threshold(value: float, name: str = "--flag_below") -> float:
    """A probability to flag words under: a number in (0, 1]."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= 1:
        raise BadValue(f"{name} {value!r}: give a probability above 0 and at most 1 (words "
                       "less likely than it are marked [[so]])")  # fmt: skip
    return float(value)


def flagged(text: str, words: list[Word], below: float) -> str:
    """``text`` with each word whose probability is under ``below`` written ``[[word]]``."""
    out, at = [], 0
    for word in words:
        where = text.find(word.word, at)
        if where < 0:  # the word does not read the same inside the text: leave it unmarked
            continue
        out.append(text[at:where])
        marked = word.prob < below
        out.append(f"{FLAG_OPEN}{word.word}{FLAG_CLOSE}" if marked else word.word)
        at = where + len(word.word)
    return "".join([*out, text[at:]])
