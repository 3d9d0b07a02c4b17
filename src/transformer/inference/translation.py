"""Text in, text out: batching, the choice of search, and the tokenizers, for translate,
evaluate, validate and attention.

``translate_ids`` sorts sentences by length, cuts them into batches (``in_length_batches``,
``data/batching.py``) and sends each batch to the search the DecodeConfig asks for
(``search_batch``): greedy, sampling or beam.

Source sentences become SentencePiece ids followed by EOS; a sentence longer than the model's
positions allow (``max_positions`` tokens) is truncated to fit, and the caller is told which
lines were, so the command line can warn: never a silent change, never a crash mid-file.
Empty sentences translate to empty strings without running the model. ``translate_with`` does
this around any engine's search (ours, or CTranslate2's in ``ctranslate2.py``), so every
engine treats lines alike; it also tokenizes target prefixes (``constraints.py``) and a
glossary's target terms (``glossary.py``; searched for by ``constrained_beam.py``), and turns
attention into word alignments (``alignment.py``). Every layer passes on ``stopped``
(search.py), so that a server stops decoding the sentences of a client that left: a batch of
them only is not decoded at all.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import Tensor

from ..config import DecodeConfig
from ..data.batching import encode_source, length_batches, pad
from ..data.tokenizer import Tokenizers
from ..errors import BadValue, UserError
from ..model.base import EncoderDecoder
from ..vocab import UNK_ID
from .alignment import attach_masking, cut_to_sources, word_links, word_of_pieces
from .beam import beam_search
from .constrained_beam import Terms, constrained_beam_search
from .glossary import Glossary, count_occurrences
from .greedy import greedy_search, sample
from .inputs import check_ids, check_texts
from .parallel import DecodeThreads, map_batches
from .search import Hypothesis, Stopped, within

# (source ids, target prefix ids or None, which of them nobody waits for any more, the target
# terms each must contain or None) -> hypotheses per sentence
SearchIds = Callable[
    [list[list[int]], list[list[int]] | None, Stopped | None, Terms | None],
    list[list[Hypothesis]],
]


def translate_ids(
    model: EncoderDecoder,
    sentences: list[list[int]],
    config: DecodeConfig,
    use_cache: bool = True,
    prefixes: list[list[int]] | None = None,
    stopped: Stopped | None = None,
    terms: Terms | None = None,
    threads: DecodeThreads = DecodeThreads(),  # noqa: B008 (frozen)
) -> list[list[Hypothesis]]:
    """Decodes many source sentences, in batches of similar length, as ``config`` says.

    Sampling if ``config.sampling`` (``nbest`` samples per sentence), else greedy search if
    ``beam_size`` is 1, else beam search.

    Args:
        sentences: source ids exactly as the encoder saw them in training (the data pipeline
            encodes pieces + EOS); nothing is added or removed here. May be empty; no PAD_ID.
        config: the search and its limits: at most ``batch_size`` sentences and
            ``max_source_tokens`` padded source tokens per batch (a longer sentence goes alone).
        prefixes: per sentence, the target ids its output must start with ([]: none).
        stopped: whether nobody waits for sentence i any more (search.py): it ends early.
        terms: per sentence, the target id sequences its output must contain ([]: none).
        threads: how many batches to decode at once (``parallel.py``); default one.
    Shape:
        returns one list of up to ``nbest`` hypotheses per sentence, best score first.
    """
    device = next(iter(model.parameters()), torch.empty(0)).device  # CPU for a parameterless stub
    config = config.sized_for(model.config)
    check_ids(sentences, model.config.src_vocab_size, "source sentence")
    check_ids(prefixes or [], model.config.tgt_vocab_size, "prefix")

    def run(indices: list[int], left: Stopped | None) -> list[list[Hypothesis]]:
        src_ids = pad([sentences[i] for i in indices], device)  # (B, S)
        prefix = pad([prefixes[i] for i in indices], device) if prefixes else None  # (B, P)
        forced = [terms[i] for i in indices] if terms else None
        return search_batch(model, src_ids, config, use_cache, prefix, left, forced)

    return in_length_batches(sentences, config, run, stopped, threads)


def in_length_batches(
    sentences: list[list[int]],
    config: DecodeConfig,
    run: Callable[[list[int], Stopped | None], list[list[Hypothesis]]],
    stopped: Stopped | None = None,
    threads: DecodeThreads = DecodeThreads(),  # noqa: B008 (frozen)
) -> list[list[Hypothesis]]:
    """Runs ``run`` on batches of sentences of similar length; results in input order.

    Sorting by length keeps padding, and so wasted work, small.

    Args:
        sentences: source ids (pieces + EOS), no PAD_ID.
        config: ``batch_size`` (not 0: ``DecodeConfig.sized_for``) and ``max_source_tokens``
            bound each batch.
        run: decodes one batch (the indices of its sentences, and ``stopped`` for them) into
            hypotheses per sentence.
        stopped: whether nobody waits for sentence i any more; such a sentence gets no
            hypotheses, and is not decoded at all if it is stopped before its batch starts.
        threads: batches decoded at once (``parallel.py``).
    """
    if not config.batch_size:
        raise ValueError("batch_size 0 is resolved for a model first (DecodeConfig.sized_for)")
    lengths = [len(ids) for ids in sentences]
    widths = [max(n, 1) for n in lengths]  # an empty source still takes a column
    order = np.argsort(lengths, kind="stable")
    size = threads.batch_size(len(sentences), config.batch_size)
    # Longest first: when batches run at once (``threads``), the calling thread takes them from
    # the front and the workers from the back (parallel.py), so the longest starts at once and a
    # long batch runs beside short ones; no thread is left decoding a long batch alone at the
    # end while the others wait. Results come back in input order either way.
    batches = length_batches(widths, None, order, config.max_source_tokens, size)[::-1]

    def decode(indices: list[int]) -> dict[int, list[Hypothesis]]:
        if stopped is not None:
            indices = [i for i in indices if not stopped(i)]
        if not indices:
            return {}
        return dict(zip(indices, run(indices, within(stopped, indices)), strict=True))

    results: dict[int, list[Hypothesis]] = {}
    for found in map_batches(decode, [batch.tolist() for batch in batches], threads):
        results.update(found)
    return [results.get(i, []) for i in range(len(sentences))]


def search_batch(
    model: EncoderDecoder,
    src_ids: Tensor,
    config: DecodeConfig,
    use_cache: bool = True,
    prefix: Tensor | None = None,
    stopped: Stopped | None = None,
    terms: Terms | None = None,
) -> list[list[Hypothesis]]:
    """One batch (B, S) through the search that the config asks for: sampling (``nbest``
    samples per sentence, each row seeded by its sentence and sample with ``config.sampling_seed``:
    ``greedy.row_seeds``), greedy search (``beam_size`` 1) or beam search; ``prefix`` (B, P),
    right-padded, is forced at the start of the outputs. A batch where some sentence has
    ``terms`` (target id sequences its output must contain) goes to constrained beam search,
    with the config's beam (1 too). With ``config.alignment`` every hypothesis gets its
    ``attention`` (``alignment.py``)."""
    if terms is not None and any(terms):
        if config.sampling:
            raise ValueError("target terms need a search, not sampling")
        found = constrained_beam_search(model, src_ids, terms, config, use_cache, prefix, stopped)
    elif config.sampling:
        n = config.nbest
        repeated = src_ids.repeat_interleave(n, dim=0)  # (B·n, S): n samples per sentence
        prefixes = prefix.repeat_interleave(n, dim=0) if prefix is not None else None  # (B·n, P)
        per_row = within(stopped, [r // n for r in range(repeated.size(0))])
        which = [r % n for r in range(repeated.size(0))]  # the sample each row is of its sentence
        drawn = sample(model, repeated, config, which, use_cache, prefixes, per_row)
        found = [sorted(drawn[i : i + n], key=lambda h: -h.score) for i in range(0, len(drawn), n)]
    elif config.beam_size == 1:
        found = [[h] for h in greedy_search(model, src_ids, config, use_cache, prefix, stopped)]
    else:
        found = beam_search(model, src_ids, config, use_cache, prefix, stopped=stopped)
    if config.alignment:
        cut_to_sources(src_ids, found)  # what the search kept, where each step read the source
    return found


@dataclass
class Translation:
    text: str
    score: float  # length-penalised log-probability (beam) or log-probability (greedy, sampling)
    tokens: list[int]
    alignment: list[tuple[int, int]] | None = None  # (source word, target word), when asked
    # each source word's best target word (alignment.word_links), for the tags
    # (tag_placement.py); None: not computed
    best_targets: list[tuple[int, int]] | None = None


def decoded(sentence: str, prefix: str = "") -> bool:
    """Whether the model decodes ``sentence``: one with words, or an empty one with a prefix,
    which the decoder continues on its own (each translation starts with its prefix). An empty
    sentence without one translates to "" and costs nothing."""
    return bool(sentence.strip() or prefix.strip())


def prefix_problem(tokenizers: Tokenizers, prefix: str, max_positions: int) -> str | None:
    """Why ``prefix`` cannot begin a translation, to follow its name in a message, or None:
    more pieces than the model's outputs hold (room for </s>), or characters the target
    vocabulary cannot spell, which would come out as the unknown piece ⁇ instead."""
    pieces = tokenizers.tgt.encode(prefix) if prefix.strip() else []
    if len(pieces) > max_positions - 1:
        return f"has {len(pieces)} pieces; the model's outputs hold at most {max_positions - 1}"
    if UNK_ID in pieces:
        unknown = sorted({c for c in prefix if UNK_ID in tokenizers.tgt.encode(c)})
        shown = " ".join(repr(c) for c in unknown[:10]) + (" ..." if len(unknown) > 10 else "")
        return f"holds characters the target vocabulary cannot spell: {shown}"
    return None


@dataclass
class TranslationResult:
    nbest: list[list[Translation]]  # per input sentence, best first
    truncated: list[int]  # indices of the inputs that were cut to fit the model
    # index of an input -> the glossary's target terms its best translation lacks (the length
    # limit left no room for them)
    unmet: dict[int, list[str]] = field(default_factory=dict)

    @property
    def best(self) -> list[str]:
        return [options[0].text if options else "" for options in self.nbest]


def translate(
    model: EncoderDecoder,
    tokenizers: Tokenizers,
    sentences: list[str],
    decode: DecodeConfig,
    prefixes: list[str] | None = None,
    stopped: Stopped | None = None,
    glossary: Glossary | None = None,
    threads: DecodeThreads = DecodeThreads(),  # noqa: B008 (frozen)
) -> TranslationResult:
    """Translates ``sentences`` (any number; batched by length inside) with the torch model;
    ``prefixes``, one per sentence ("" for none), start the outputs; ``stopped(i)``: nobody
    waits for sentence i any more (its translation is cut short); ``glossary``: the target
    terms the outputs must contain (``glossary.py``); ``threads``: batches decoded at once."""
    pairs = decode.sentences_per_batch(model.config, search=False)  # teacher-forced batches
    decode = decode.sized_for(model.config)

    def search_ids(
        ids: list[list[int]], prefix_ids: list[list[int]] | None, left: Stopped | None,
        terms: Terms | None,
    ) -> list[list[Hypothesis]]:  # fmt: skip
        found = translate_ids(model, ids, decode, prefixes=prefix_ids, stopped=left, terms=terms,
                              threads=threads)  # fmt: skip
        if decode.alignment and decode.alignment_method == "masking":
            attach_masking(model, ids, found, words, decode.max_source_tokens, pairs)
        return found

    def words(source: list[int]) -> list[int | None]:
        return word_of_pieces([tokenizers.src.id_to_piece(i) for i in source])

    return translate_with(search_ids, tokenizers, sentences, model.config.max_positions, decode,
                          prefixes, stopped, glossary)  # fmt: skip


def tokenizers_for(
    tokenizers: Tokenizers, default: DecodeConfig, decode: DecodeConfig
) -> Tokenizers:
    """An engine's ``tokenizers`` (made for its ``default`` search) for the search ``decode``:
    the same, or putting ``decode.target_language``'s token before each source instead."""
    if decode.target_language == default.target_language:
        return tokenizers
    return tokenizers.for_target_language(decode.target_language)


def translate_with(
    search_ids: SearchIds,
    tokenizers: Tokenizers,
    sentences: list[str],
    max_positions: int,
    decode: DecodeConfig,
    prefixes: list[str] | None = None,
    stopped: Stopped | None = None,
    glossary: Glossary | None = None,
) -> TranslationResult:
    """Text in, text out around any engine's ``search_ids`` (source ids, prefix ids ->
    hypotheses).

    Empty sentences translate to "" without running the engine (unless they have a prefix:
    ``decoded``); a sentence longer than
    ``max_positions`` tokens (pieces + EOS) is cut to fit, keeping its EOS, and reported in
    ``truncated``. Every engine goes through here, so they treat lines alike.

    Args:
        decode: the search; ``min_len`` is checked against the model's positions here, and
            ``alignment`` turns each hypothesis' attention into word links.
        prefixes: one per sentence ("" for none), tokenized with the target tokenizer; a prefix
            must leave room for EOS within ``max_positions``.
        glossary: terms the outputs must contain (``glossary.py``), checked against the model
            here; a best output that lacks some is listed in ``unmet``.
    """
    check_texts(sentences, "sentences")
    if prefixes is not None:
        check_texts(prefixes, "prefixes")
    if decode.min_len > max_positions - 1:
        raise BadValue(f"min_len {decode.min_len} is above the model's length limit "
                       f"({max_positions - 1} tokens)")  # fmt: skip
    if prefixes is not None and len(prefixes) != len(sentences):
        raise UserError(f"{len(prefixes)} prefixes for {len(sentences)} sentences; give one per "
                        "sentence (an empty one for none)")  # fmt: skip
    if glossary is not None:
        if decode.sampling:
            raise UserError("a glossary needs a search (beam_size 1 or more), not sampling")
        glossary.check(tokenizers, max_positions)
    todo, ids, prefix_ids, truncated = [], [], [], []
    terms: list[list[str]] = []
    for i, sentence in enumerate(sentences):
        if not decoded(sentence, prefixes[i] if prefixes else ""):
            continue
        pieces = encode_source(tokenizers.src.encode(sentence))
        if len(pieces) > max_positions:
            pieces = [*pieces[: max_positions - 1], pieces[-1]]  # keep the EOS
            truncated.append(i)
        forced = tokenizers.tgt.encode(prefixes[i]) if prefixes and prefixes[i].strip() else []
        problem = prefix_problem(tokenizers, prefixes[i], max_positions) if forced else None
        if problem:
            raise UserError(f"prefix {i + 1} {problem}")
        todo.append(i)
        ids.append(pieces)
        prefix_ids.append(forced)
        terms.append(glossary.targets_in(sentence) if glossary is not None else [])
    empty = [] if decode.alignment else None
    nbest: list[list[Translation]] = [[Translation("", 0.0, [], empty)] for _ in sentences]
    term_ids = [[tokenizers.tgt.encode(t) for t in ts] for ts in terms]
    if ids:
        found = search_ids(ids, prefix_ids if any(prefix_ids) else None, within(stopped, todo),
                           term_ids if any(term_ids) else None)  # fmt: skip
        for i, source, hypotheses in zip(todo, ids, found, strict=True):
            nbest[i] = [_translation(h, source, tokenizers, decode.alignment) for h in hypotheses]
    unmet = {}
    for i, wanted, wanted_ids in zip(todo, terms, term_ids, strict=True):
        missing = _missing(nbest[i][0].tokens if nbest[i] else [], wanted, wanted_ids)
        if missing:
            unmet[i] = missing
    return TranslationResult(nbest, truncated, unmet)


def _missing(tokens: list[int], terms: list[str], term_ids: list[list[int]]) -> list[str]:
    """The terms (text, ids; a term listed n times is needed n times) that ``tokens`` lacks."""
    needed: dict[str, int] = {}
    for text in terms:
        needed[text] = needed.get(text, 0) + 1
    ids_of = dict(zip(terms, term_ids, strict=True))
    return [text for text, n in needed.items() if count_occurrences(tokens, ids_of[text]) < n]


def _translation(
    h: Hypothesis, source: list[int], tokenizers: Tokenizers, align: bool
) -> Translation:
    """A hypothesis as text, with its word alignment when asked for (the engine then set its
    attention)."""
    text = tokenizers.tgt.decode(h.tokens)
    if not align:
        return Translation(text, h.score, h.tokens)
    src_pieces = [tokenizers.src.id_to_piece(i) for i in source[:-1]]  # without </s>
    tgt_pieces = [tokenizers.tgt.id_to_piece(i) for i in h.tokens]
    links, best_targets = word_links(h.attention, src_pieces, tgt_pieces)
    return Translation(text, h.score, h.tokens, links, best_targets)
