"""How much work a request may make the model do: the one count behind the server's budget.

A search runs the encoder over each source, then the decoder one step at a time: at most L + 1
steps for a sentence whose output may reach L tokens (the last step forces EOS), each over the
sentence's rows: its beam (K), the samples drawn (n, each with its own copy of the source), or 1
for greedy search. L is the searches' own limit (``search.length_limits``, the function whose
value ends their loops): floor(a · source + b), raised to ``min_len`` and to the prefix's
length, capped at the model's positions - 1. A forced prefix goes through the decoder as the
first steps of the output, so every row counts it. A glossary's terms raise the limit as a
prefix does (``constrained_beam.py``: room for the prefix and the sentence's target terms),
so they count as prefix tokens here; and the constrained search does work of its own at every
step, in Python, that grows with the square of a sentence's distinct terms T: at most
K·(4 + 2T) candidates (the 2K best, and for each beam its own best token, EOS, and the first
and the next token of each term), each advanced over the T terms (``TermState.advance``) and
ranked, counted as K·(4 + 2T)·(T + 1) term updates, ``TERM_UPDATES_PER_TOKEN`` to a token.
Word alignments from attention cost no pass of their own (the search keeps the weights its
steps compute, ``alignment.py``); by masking they re-run the model over every returned
hypothesis once per source word and once unmasked (at most the source's length: a word has at
least one piece, and </s> is none); /attention and the step-through view re-run it over
the one translation they show, and the words' probabilities (``confidence.py``: jsonl,
flag_below) over the best one. Each pass is counted on its own: a request that asks for
several pays for each.

    cost = Σ over non-empty sentences of
           encoder rows · source + rows · (L + 1) + re-run · (source + L + 1)
           [+ (L + 1) · ⌈K·(4 + 2T)·(T + 1) / TERM_UPDATES_PER_TOKEN⌉ with T > 0 terms]

in tokens the model processes (encoder positions plus decoder positions). A search can only do
less: a sentence leaves the batch when its hypotheses end (greedy search may keep its row idle
in the batch a while longer, ``search.rows_kept``, but never past the sentence's own limit L),
and beam search decodes its first step once per sentence, not K times. Scoring
(teacher-forced, ``score.py``) processes each source and each target + EOS once.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..config import DecodeConfig
from ..data.batching import encode_source
from ..data.tokenizer import Tokenizers
from .alignment import word_count, word_of_pieces
from .glossary import Glossary
from .search import length_limits
from .translation import decoded

# A term update (one term of one candidate advanced by a token) took 0.4-0.7 µs, one thread on
# the 2-core AMD EPYC; a decoder token (one row of one search step) of the demo model, the
# smallest the project trains, 55 µs in the largest plain request the default budget admits
# and 200-460 µs in smaller batches: a token is counted for every 50 term updates.
TERM_UPDATES_PER_TOKEN = 50


@dataclass(frozen=True)
class Cost:
    """What one request may make the model process."""

    tokens: int  # encoder and decoder positions, in all
    sentences: int  # those that are decoded (an empty one is not)
    longest: int  # the most output tokens one sentence may reach
    rows: int  # hypotheses decoded side by side per sentence

    def __str__(self) -> str:
        return (
            f"{self.tokens:,} tokens ({self.sentences:,} sentences of up to {self.longest} "
            f"output tokens x {self.rows} hypotheses, sources and prefixes included)"
        )


def search_cost(
    source_lengths: list[int],
    prefix_lengths: list[int] | None,
    decode: DecodeConfig,
    max_positions: int,
    rerun: int = 0,
    source_words: list[int] | None = None,
    terms: list[int] | None = None,
) -> Cost:
    """The most tokens a search of these sentences can make the model process (see above).

    Args:
        source_lengths: each sentence's source ids, pieces + EOS, as the encoder reads them.
        prefix_lengths: each sentence's forced target prefix, in pieces (None: no prefixes).
        decode: the search (rows, length limit, alignments).
        rerun: hypotheses per sentence the caller re-runs the model over besides the search's
            own alignments (an attention view, the words' probabilities: 1 each).
        source_words: each sentence's words, which masking alignments mask one at a time
            (None: at most one per piece).
        terms: each sentence's distinct glossary terms, whose constrained search works at
            every step (None: no glossary).
    """
    if not source_lengths:
        return Cost(0, 0, 0, decode.rows)
    prefixes = prefix_lengths or [0] * len(source_lengths)
    room = torch.tensor([max(decode.min_len, p) for p in prefixes])  # (B,)
    src = torch.tensor(source_lengths)  # (B,)
    limits = length_limits(src, decode.max_len_a, decode.max_len_b, max_positions, room)  # (B,)
    encoder_rows = decode.nbest if decode.sampling else 1  # sampling repeats the source
    if decode.alignment and decode.alignment_method == "masking":
        # once more per source word and once unmasked: at most once per source id (pieces + EOS)
        masked = src if source_words is None else torch.tensor(source_words) + 1  # (B,)
        rerun = rerun + decode.nbest * masked  # (B,)
    steps = limits + 1  # (B,) the last one forces EOS
    per_sentence = encoder_rows * src + decode.rows * steps + rerun * (src + steps)  # (B,)
    if terms is not None:
        T = torch.tensor(terms)  # (B,)
        updates = decode.rows * (4 + 2 * T) * (T + 1) * (T > 0)  # (B,) per step
        per_sentence = per_sentence + steps * (-(-updates // TERM_UPDATES_PER_TOKEN))  # ⌈⌉
    return Cost(int(per_sentence.sum()), len(source_lengths), int(limits.max()), decode.rows)


def translation_cost(
    tokenizers: Tokenizers,
    sentences: list[str],
    prefixes: list[str] | None,
    decode: DecodeConfig,
    max_positions: int,
    rerun: int = 0,
    glossary: Glossary | None = None,
) -> Cost:
    """``search_cost`` of sentences and prefixes as text, prepared as ``translate_with``
    prepares them: empty sentences are not decoded (but with a prefix: ``decoded``), a source
    is cut to ``max_positions``, an empty prefix is none; a sentence's glossary terms (their
    target pieces) are room the search makes, as a prefix's pieces are."""
    masking = decode.alignment and decode.alignment_method == "masking"
    sources, forced, words, terms = [], [], [], []
    for i, sentence in enumerate(sentences):
        prefix = prefixes[i] if prefixes else ""
        if not decoded(sentence, prefix):
            continue
        ids = tokenizers.src.encode(sentence)[: max_positions - 1]  # the pieces the model reads
        sources.append(len(encode_source(ids)))  # and EOS
        if masking:
            words.append(word_count(word_of_pieces([tokenizers.src.id_to_piece(k) for k in ids])))
        room = len(tokenizers.tgt.encode(prefix)) if prefix.strip() else 0
        if glossary is not None:
            targets = glossary.targets_in(sentence)
            room += sum(len(tokenizers.tgt.encode(t)) for t in targets)
            terms.append(len(set(targets)))
        forced.append(room)
    return search_cost(sources, forced, decode, max_positions, rerun, words if masking else None,
                       terms if glossary is not None else None)  # fmt: skip


def scoring_cost(
    tokenizers: Tokenizers, sources: list[str], targets: list[str], max_positions: int
) -> Cost:
    """The tokens scoring these pairs makes the model process: each source (cut to
    ``max_positions``) and each target + EOS, once."""
    src = [min(len(encode_source(tokenizers.src.encode(s))), max_positions) for s in sources]
    tgt = [len(tokenizers.tgt.encode(t)) + 1 for t in targets]
    return Cost(sum(src) + sum(tgt), len(sources), max(tgt, default=0), 1)
