"""Where a run's sentence pairs come from: a named corpus from the registry, or the user's files.

``CORPORA`` is the one list of named corpora: the config names one (``data.corpus``) and
``load_splits`` calls its loader; adding a corpus is adding an entry here.

- ``numbers``: generated (``numbers.py``), with a test split reported by magnitude class;
- ``multi30k``: task 1 of Elliott et al. (2016), its own train / val / test_2016_flickr;
- ``tatoeba-fra-eng``, ``tatoeba-deu-eng``: one file of pairs, split with split_seed,
  valid_fraction and test_fraction, in either direction.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from ..config import DataConfig
from ..errors import UserError
from . import numbers
from .download import corpus_file
from .readers import Pair, drop_empty, iter_parallel, iter_tsv_pairs, read_parallel
from .splits import PairStream, Splits, SplitStreams, split_stream

MULTI30K_LANGS = ("de", "en", "fr")
MULTI30K_SPLITS = {"train": "train", "valid": "val", "test": "test_2016_flickr"}
# Each Tatoeba corpus: its non-English language and its file (English is always column 1).
TATOEBA = {
    "tatoeba-fra-eng": ("fr", "tatoeba/fra-eng.zip"),
    "tatoeba-deu-eng": ("de", "tatoeba/deu-eng.zip"),
}


@dataclass(frozen=True)
class Corpus:
    """A named corpus: what it is, and how its splits are made from a DataConfig."""

    description: str
    load: Callable[[DataConfig], SplitStreams]


def multi30k_files(data: DataConfig) -> dict[str, tuple[Path, Path]]:
    """{"train", "valid", "test": (source file, target file)} of Multi30k task 1.

    Args:
        data: src_lang and tgt_lang (two of de, en, fr) and data_dir are used.
    """
    for lang in (data.src_lang, data.tgt_lang):
        if lang not in MULTI30K_LANGS:
            raise UserError(f"multi30k has languages {MULTI30K_LANGS}; got {lang!r}")
    if data.src_lang == data.tgt_lang:
        raise UserError(f"src_lang and tgt_lang are both {data.src_lang!r}")
    return {
        split: tuple(  # type: ignore[misc]
            corpus_file(f"multi30k/{name}.{lang}.gz", data.data_dir, data.verify_checksums)
            for lang in (data.src_lang, data.tgt_lang)
        )
        for split, name in MULTI30K_SPLITS.items()
    }


def tatoeba_file(data: DataConfig) -> tuple[Path, bool]:
    """The zip of a tatoeba corpus and whether English (its first column) is the source side.

    Args:
        data: corpus, src_lang and tgt_lang (en and the corpus's other language, in either
            order) and data_dir are used.
    """
    other, key = TATOEBA[data.corpus]
    if {data.src_lang, data.tgt_lang} != {"en", other}:
        raise UserError(
            f"{data.corpus} pairs en with {other}; got src_lang={data.src_lang!r} "
            f"tgt_lang={data.tgt_lang!r}"
        )
    return corpus_file(key, data.data_dir, data.verify_checksums), data.src_lang == "en"


def _direction(data: DataConfig) -> str:
    return f"{data.src_lang}->{data.tgt_lang}"


def _numbers(data: DataConfig) -> SplitStreams:
    split = numbers.number_splits(data)
    valid, test = (numbers.number_pairs(data, part) for part in (split.valid, split.test))
    train = PairStream(lambda: numbers.iter_number_pairs(data, split.train))
    source = f"numbers 0..{data.numbers_max} {_direction(data)} (generated, seed {data.split_seed})"
    groups = [numbers.magnitude(n) for n in split.test]
    return SplitStreams(train, valid, test, source, 0, groups, numbers.numbers_test_note(data))


def _multi30k(data: DataConfig) -> SplitStreams:
    files = multi30k_files(data)
    held, skipped = {}, 0
    for name in ("valid", "test"):
        held[name], dropped = drop_empty(read_parallel(*files[name]))
        skipped += dropped
    train = PairStream(lambda: iter_parallel(*files["train"]))
    source = f"multi30k {_direction(data)} from {files['train'][0].parent}"
    return SplitStreams(train, held["valid"], held["test"], source, skipped)


def _tatoeba(data: DataConfig) -> SplitStreams:
    path, english_is_source = tatoeba_file(data)
    # Split by source sentence: many sentences have several translations, and a test source
    # must not be trained on with another one; a test source keeps all of them as references.
    train, valid, test = split_stream(
        lambda: iter_tsv_pairs(path, first_is_source=english_is_source),
        data.valid_fraction, data.test_fraction, data.split_seed, by_source=True,
    )  # fmt: skip
    source = (
        f"{data.corpus} {_direction(data)} from {path} (split by source sentence, seed "
        f"{data.split_seed})"
    )
    return SplitStreams(train, valid, test, source)


CORPORA: dict[str, Corpus] = {
    "numbers": Corpus("number words, English to French or German (generated)", _numbers),
    "multi30k": Corpus("Multi30k task 1 image captions, de/en/fr (29k pairs)", _multi30k),
    "tatoeba-fra-eng": Corpus("Tatoeba/Anki French-English pairs (manythings.org)", _tatoeba),
    "tatoeba-deu-eng": Corpus("Tatoeba/Anki German-English pairs (manythings.org)", _tatoeba),
}


def _user_pairs(src: str, tgt: str | None, key: str = "tgt") -> Callable[[], Iterator[Pair]]:
    """The pairs of ``src`` and ``tgt``, or of the TSV ``src``; ``key``: tgt's data key."""
    if tgt is not None:
        return lambda: iter_parallel(src, tgt)
    return lambda: iter_tsv_pairs(src, target_key=key)


def _user_files(data: DataConfig) -> SplitStreams:
    if data.src is None:
        raise UserError("no training data: set data.corpus, or data.src (and data.tgt)")
    if data.valid_tgt is not None and data.valid_src is None:
        raise UserError(f"data.valid_tgt ({data.valid_tgt}) is given without data.valid_src")
    files = data.src if data.tgt is None else f"{data.src} + {data.tgt}"
    make = _user_pairs(data.src, data.tgt)
    if next(iter(PairStream(make)), None) is None:
        raise UserError(f"{files}: no sentence pairs")
    if data.valid_src is None:
        train, valid, test = split_stream(
            make, data.valid_fraction, data.test_fraction, data.split_seed
        )
        return SplitStreams(train, valid, test, f"{files} (split seed {data.split_seed})")
    valid, skipped_valid = drop_empty(
        list(_user_pairs(data.valid_src, data.valid_tgt, "valid_tgt")())
    )
    train, _, test = split_stream(make, 0.0, data.test_fraction, data.split_seed)
    valid_files = (
        data.valid_src if data.valid_tgt is None else f"{data.valid_src} + {data.valid_tgt}"
    )
    source = f"{files}, valid {valid_files}"
    return SplitStreams(train, valid, test, source, skipped_valid)


def check_corpus(data: DataConfig) -> None:
    """A named corpus must be in the registry, and files exclude one."""
    if data.corpus is not None and data.corpus not in CORPORA:
        raise UserError(
            f"unknown corpus data.corpus={data.corpus!r}; the named corpora are "
            f"{', '.join(CORPORA)} (or null to train on files)"
        )
    if data.corpus is not None and data.src is not None:
        raise UserError(
            f"data.corpus is {data.corpus!r} but data.src ({data.src}) is given too: set "
            f"data.corpus to null to train on files"
        )


def stream_splits(data: DataConfig) -> SplitStreams:
    """The train/valid/test pairs that ``data`` describes, training pairs as a stream (read,
    downloaded or generated again on each pass: a corpus of any size in bounded memory).

    A named corpus comes from its loader in ``CORPORA``. Files: ``src`` (+ ``tgt``), split with
    split_seed, valid_fraction and test_fraction unless ``valid_src`` (+ ``valid_tgt``) is given.

    Args:
        data: the data section of the run config.
    """
    check_corpus(data)
    if data.corpus is None:
        return _user_files(data)
    return CORPORA[data.corpus].load(data)


def load_splits(data: DataConfig) -> Splits:
    """``stream_splits`` with every split as a list."""
    return stream_splits(data).materialize()
