"""Named corpora: where their files come from, and the generated number-words corpus.

``multi30k`` (Elliott et al. 2016, image captions in de/en/fr) and the Tatoeba sentence pairs
collected at manythings.org/anki are read from a local ``data_dir`` or downloaded once into a
cache folder, verified by SHA-256. ``numbers`` needs no file: English number words and their
French or German translations come from num2words. Reading and splitting files is data.py's job.
"""

from __future__ import annotations

import hashlib
import os
import random
import tempfile
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from num2words import CONVERTER_CLASSES
from tqdm import tqdm

from .config import DataConfig
from .errors import UserError

Pair = tuple[str, str]


@dataclass(frozen=True)
class RemoteFile:
    """A file of a named corpus: its public address and the SHA-256 it must have."""

    url: str
    sha256: str


_MULTI30K = "https://raw.githubusercontent.com/multi30k/dataset/master/data/task1/raw/"
_MANYTHINGS = "https://www.manythings.org/anki/"

# Keyed by the path inside the cache folder (or inside data_dir). The checksums are those of the
# copies this project was tested with; a file that changed upstream is refused, not trained on.
REMOTE_FILES: dict[str, RemoteFile] = {
    "multi30k/train.de.gz": RemoteFile(
        _MULTI30K + "train.de.gz",
        "726e39b2fa9eb9ffb6dc763fb35a179f80fae06ffc5d28b6ace5faa883de28a6",
    ),
    "multi30k/train.en.gz": RemoteFile(
        _MULTI30K + "train.en.gz",
        "d79cfa999dd4c51d2cb42499b6796d5a882c3a8a961923c25a898c90f8bbd56f",
    ),
    "multi30k/train.fr.gz": RemoteFile(
        _MULTI30K + "train.fr.gz",
        "622e75069e9f4c577425c4f277116ce66e63a2401c0a2312d90073cb12379a3c",
    ),
    "multi30k/val.de.gz": RemoteFile(
        _MULTI30K + "val.de.gz",
        "f0cba2f995189cf5770f29a8a9a537a3ad3f51657ad873405082ff6863a5e75a",
    ),
    "multi30k/val.en.gz": RemoteFile(
        _MULTI30K + "val.en.gz",
        "14f7d25ddd868909a9213e361768460edcacdd6ab9d1e77b92560dc10c10dc28",
    ),
    "multi30k/val.fr.gz": RemoteFile(
        _MULTI30K + "val.fr.gz",
        "ca3106f1a72390591d25f6c45cb4cd39dec4cd3f123e099748a3ce5256c160e9",
    ),
    "multi30k/test_2016_flickr.de.gz": RemoteFile(
        _MULTI30K + "test_2016_flickr.de.gz",
        "9204244e408ccb38d2a55cfcd344df15005fc42a07a6e55ca6c52b6ababb8cc8",
    ),
    "multi30k/test_2016_flickr.en.gz": RemoteFile(
        _MULTI30K + "test_2016_flickr.en.gz",
        "611d361c6334bc7246101d48097c13cf5c4413c5befc793cc629934359d532d9",
    ),
    "multi30k/test_2016_flickr.fr.gz": RemoteFile(
        _MULTI30K + "test_2016_flickr.fr.gz",
        "6d326e188d259fb1d04ac19eae3af956559b3a0b93d7635e56c90987c40c8b90",
    ),
    "tatoeba/fra-eng.zip": RemoteFile(
        _MANYTHINGS + "fra-eng.zip",
        "16c4f7d0df9e7c5e6c54cdb0447f3f4a18a55052ff5e2e0b27dd4a06c0e49d04",
    ),
    "tatoeba/deu-eng.zip": RemoteFile(
        _MANYTHINGS + "deu-eng.zip",
        "b7688f84f99fa33c17397c14d8bd9cef1fdeb2ee0bf50074767023aee8926e28",
    ),
}

MULTI30K_LANGS = ("de", "en", "fr")
MULTI30K_SPLITS = {"train": "train", "valid": "val", "test": "test_2016_flickr"}
# Each Tatoeba corpus: its non-English language and its file (English is always column 1).
TATOEBA = {
    "tatoeba-fra-eng": ("fr", "tatoeba/fra-eng.zip"),
    "tatoeba-deu-eng": ("de", "tatoeba/deu-eng.zip"),
}
NUMBERS_LANGS = ("en", "fr", "de")


def cache_dir() -> Path:
    """$TRANSFORMER_DATA, else $XDG_CACHE_HOME/transformer, else ~/.cache/transformer."""
    if os.environ.get("TRANSFORMER_DATA"):
        return Path(os.environ["TRANSFORMER_DATA"]).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "transformer"


def sha256_of(path: Path) -> str:
    """The hex SHA-256 of a file, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def download(url: str, dest: Path, sha256: str | None) -> Path:
    """Downloads ``url`` to ``dest`` unless a verified copy is already there.

    The bytes go to a uniquely named ``.part`` file beside ``dest`` (several torchrun ranks may
    download at once), are hashed on the way, and only a verified file is renamed into place, so
    an interrupted or corrupted download never leaves a file that looks complete.

    Args:
        url: any address urllib opens (https://, file://).
        dest: where the file ends up.
        sha256: the expected hex digest; a mismatch is a UserError and nothing is kept.
            None: accept whatever the address serves (data.verify_checksums: false).
    """
    if dest.is_file() and (sha256 is None or sha256_of(dest) == sha256):
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, part_name = tempfile.mkstemp(dir=dest.parent, prefix=dest.name + ".", suffix=".part")
    part = Path(part_name)
    digest = hashlib.sha256()
    try:
        # manythings.org refuses urllib's default User-Agent.
        request = urllib.request.Request(url, headers={"User-Agent": "transformer/0.1"})
        with os.fdopen(fd, "wb") as out, urllib.request.urlopen(request, timeout=60) as response:
            size = int(response.headers.get("Content-Length") or 0) or None
            with tqdm(total=size, unit="B", unit_scale=True, desc=dest.name, disable=None) as bar:
                for block in iter(lambda: response.read(1 << 16), b""):
                    out.write(block)
                    digest.update(block)
                    bar.update(len(block))
        if sha256 is not None and digest.hexdigest() != sha256:
            raise UserError(
                f"{url}: checksum mismatch (sha256 {digest.hexdigest()}, expected {sha256}); "
                f"the file changed upstream since this version was tested: pass "
                f"--verify_checksums false to use it anyway, or put the file you want in a "
                f"folder as {dest.name} and pass --data_dir FOLDER"
            )
        os.replace(part, dest)
    except (urllib.error.URLError, OSError) as error:
        raise UserError(
            f"could not download {url} to {dest}: {error}; download it yourself, put it in a "
            f"folder as {dest.name} and pass --data_dir FOLDER"
        ) from None
    finally:
        part.unlink(missing_ok=True)
    return dest


def corpus_file(key: str, data_dir: str | None, verify: bool = True) -> Path:
    """The local path of a named corpus file (a key of REMOTE_FILES), downloading it if needed.

    Args:
        key: e.g. ``"multi30k/train.de.gz"``.
        data_dir: a folder holding the file as ``train.de.gz`` or ``multi30k/train.de.gz``;
            nothing is downloaded or verified then. None: the cache folder, filled on demand.
        verify: check the download against the pinned SHA-256.
    """
    if data_dir is not None:
        folder = Path(data_dir).expanduser()
        for path in (folder / Path(key).name, folder / key):
            if path.is_file():
                return path
        raise UserError(
            f"file not found: {folder / Path(key).name} (nor {folder / key}); data_dir must "
            f"hold the files of the corpus under their original names"
        )
    remote = REMOTE_FILES[key]
    return download(remote.url, cache_dir() / key, remote.sha256 if verify else None)


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


def _below_thousand(lang: str) -> list[tuple[str, int]]:
    converter = CONVERTER_CLASSES[lang]
    return [(converter.to_cardinal(n), n) for n in range(1000)]


class NumberWords:
    """Cardinal number words in one language, exactly as num2words writes them, but fast.

    num2words searches its whole table of powers for every number (~100 µs each). For
    n = hi · 1000 + lo it builds the words from those of hi, "thousand" and lo with its
    language's ``merge`` rule (which knows, say, that French drops the plural s of "quatre-vingts"
    before "mille"); doing the same from a cached table of 0..999 is ~50x faster. Larger numbers
    are passed to num2words itself. tests/test_corpora.py checks equality with num2words.
    """

    def __init__(self, lang: str) -> None:
        self.converter = CONVERTER_CLASSES[lang]
        self.small = _below_thousand(lang)
        self.thousand = (self.converter.cards[1000], 1000)

    def __call__(self, n: int) -> str:
        if n < 1000:
            return self.small[n][0]
        if n >= 1_000_000:
            return self.converter.to_cardinal(n)
        hi, lo = divmod(n, 1000)
        words = self.converter.merge(self.small[hi], self.thousand)
        if lo:
            words = self.converter.merge(words, self.small[lo])
        return words[0]


def _sample_range(rng: random.Random, low: int, high: int, k: int) -> list[int]:
    """k distinct integers from low..high, using only rng.random() (stable across Pythons)."""
    size = high - low + 1
    if 2 * k >= size:  # dense: a partial Fisher-Yates shuffle of the whole range
        values = list(range(low, high + 1))
        for i in range(k):
            j = i + int(rng.random() * (size - i))
            values[i], values[j] = values[j], values[i]
        return values[:k]
    chosen: dict[int, None] = {}  # sparse: draw until k distinct, keeping the order of drawing
    while len(chosen) < k:
        chosen[low + int(rng.random() * size)] = None
    return list(chosen)


# Numbers below 100 are the vocabulary of the task itself: "onze", "seize", "soixante et onze",
# "quatre-vingt-dix-neuf" cannot be inferred from other numbers, so a 1- or 2-digit number held
# out of training could only be guessed. From 3 digits on, numbers are compositions of those
# words, and the held-out ones measure generalisation.
HOLDOUT_MIN_DIGITS = 3
HOLDOUT_SHARE = 0.125  # a held-out split (valid or test) takes at most this share of a class
# The classes results are reported by.
MAGNITUDES = ((1, 1, "1 digit"), (2, 2, "2 digits"), (3, 3, "3 digits"), (4, 6, "4-6 digits"))


def magnitude(n: int) -> str:
    """The reporting class of ``n``: "1 digit", "2 digits", "3 digits", "4-6 digits" (or "7+")."""
    digits = len(str(n))
    for low, high, name in MAGNITUDES:
        if low <= digits <= high:
            return name
    return f"{MAGNITUDES[-1][1] + 1}+ digits"


@dataclass(frozen=True)
class DigitClass:
    """The numbers with one number of digits, within 0..numbers_max."""

    digits: int
    low: int
    high: int

    @property
    def size(self) -> int:
        return self.high - self.low + 1

    @property
    def held_out(self) -> bool:
        """Whether valid and test numbers of this class are kept out of training."""
        return self.digits >= HOLDOUT_MIN_DIGITS


def digit_classes(numbers_max: int) -> list[DigitClass]:
    """0..9, 10..99, 100..999, ... up to numbers_max."""
    return [
        DigitClass(d, 0 if d == 1 else 10 ** (d - 1), min(10**d - 1, numbers_max))
        for d in range(1, len(str(numbers_max)) + 1)
    ]


def _quotas(rooms: list[int], total: int) -> list[int]:
    """Counts per class summing to at most ``total``: equal shares, a class with less room taken
    whole and the rest shared among the others (water-filling)."""
    counts = [0] * len(rooms)
    remaining, open_classes = total, [c for c, room in enumerate(rooms) if room > 0]
    while remaining and open_classes:
        share = max(1, remaining // len(open_classes))
        for c in list(open_classes):
            take = min(share, rooms[c] - counts[c], remaining)
            counts[c] += take
            remaining -= take
            if counts[c] == rooms[c]:
                open_classes.remove(c)
    return counts


@dataclass
class NumberSplits:
    """The numbers of each split (train may repeat numbers; valid and test do not)."""

    train: list[int]
    valid: list[int]
    test: list[int]


def number_splits(data: DataConfig) -> NumberSplits:
    """Which numbers go to train, valid and test.

    Valid and test each hold every digit class equally, as far as a class has numbers: the 10
    one-digit and 90 two-digit numbers are taken whole. From ``HOLDOUT_MIN_DIGITS`` digits on,
    valid and test numbers are held out of training (at most ``HOLDOUT_SHARE`` of a class each);
    below that a class is too small to hold out, so its numbers are all trained on, and reports
    say so. Training draws ``numbers_train`` examples with replacement, each digit class equally
    often, so that the few short numbers are seen hundreds of times rather than once.
    Deterministic for a given split_seed, on any Python version.

    Args:
        data: numbers_max, numbers_train/valid/test and split_seed are used.
    """
    sizes = [data.numbers_train, data.numbers_valid, data.numbers_test]
    if min(sizes) < 0:
        raise UserError(f"numbers_train/valid/test must be >= 0, got {sizes}")
    rng = random.Random(data.split_seed)
    classes = digit_classes(data.numbers_max)
    rooms = [int(c.size * HOLDOUT_SHARE) if c.held_out else c.size for c in classes]
    held_out: set[int] = set()
    evaluation: list[list[int]] = []
    for total in (data.numbers_valid, data.numbers_test):
        numbers = []
        for c, count in zip(classes, _quotas(rooms, total), strict=True):
            drawn: dict[int, None] = {}  # distinct, in the order drawn
            while len(drawn) < count:
                n = c.low + int(rng.random() * c.size)
                if n not in held_out:
                    drawn[n] = None
            if c.held_out:
                held_out.update(drawn)
            numbers += drawn
        # Shuffle across classes so that any prefix (validation BLEU) has every magnitude.
        order = _sample_range(rng, 0, len(numbers) - 1, len(numbers))
        evaluation.append([numbers[i] for i in order])
    # Every number of a class too small to hold out once (so that valid and test really are
    # trained on), then draws with replacement: a class at random, then a number of it.
    train = [n for c in classes if not c.held_out for n in range(c.low, c.high + 1)]
    train = train if len(train) <= data.numbers_train else []
    while len(train) < data.numbers_train:
        c = classes[int(rng.random() * len(classes))]
        n = c.low + int(rng.random() * c.size)
        while n in held_out:
            n = c.low + int(rng.random() * c.size)
        train.append(n)
    return NumberSplits(train, evaluation[0], evaluation[1])


def number_pairs(data: DataConfig, numbers: list[int]) -> list[Pair]:
    """(number words in src_lang, in tgt_lang) for each number.

    Args:
        data: src_lang and tgt_lang (en, fr or de) are used.
    """
    for lang in (data.src_lang, data.tgt_lang):
        if lang not in NUMBERS_LANGS:
            raise UserError(f"the numbers corpus has languages {NUMBERS_LANGS}; got {lang!r}")
    if data.src_lang == data.tgt_lang:
        raise UserError(f"src_lang and tgt_lang are both {data.src_lang!r}")
    src_words, tgt_words = NumberWords(data.src_lang), NumberWords(data.tgt_lang)
    return [(src_words(n), tgt_words(n)) for n in numbers]


def numbers_corpus(data: DataConfig) -> tuple[list[Pair], list[Pair], list[Pair]]:
    """Train/valid/test pairs of the numbers corpus (see ``number_splits``)."""
    splits = number_splits(data)
    return (
        number_pairs(data, splits.train),
        number_pairs(data, splits.valid),
        number_pairs(data, splits.test),
    )


def numbers_test_note(data: DataConfig) -> str:
    """Which classes of the test split are held out of training and which are not."""
    classes = digit_classes(data.numbers_max)
    seen = [c.digits for c in classes if not c.held_out]
    held = [c.digits for c in classes if c.held_out]
    parts = []
    if held:
        parts.append(f"numbers of {held[0]}+ digits are held out of training")
    if seen:
        digits = " and ".join(str(d) for d in seen)
        parts.append(
            f"the {sum(classes[d - 1].size for d in seen)} numbers of {digits} digit(s) are too "
            "few to hold out, so those test numbers are also trained on"
        )
    return "; ".join(parts)
