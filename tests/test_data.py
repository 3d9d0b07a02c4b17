"""File readers and splits: every format, every bad input as a clear error, reproducible splits."""

import gzip
import io
import os
import subprocess
import sys
import zipfile
from dataclasses import replace

import pytest

from transformer.config import DataConfig
from transformer.data import (
    drop_empty,
    load_splits,
    read_lines,
    read_parallel,
    read_tsv_pairs,
    readers,
    split_pairs,
)
from transformer.data.numbers import numbers_corpus
from transformer.errors import UserError

FILES = DataConfig(corpus=None)


def write(path, text, encoding="utf-8"):
    data = text.encode(encoding) if isinstance(text, str) else text
    if path.suffix == ".gz":
        path.write_bytes(gzip.compress(data))
    else:
        path.write_bytes(data)
    return path


@pytest.mark.parametrize("name", ["plain.txt", "compressed.gz"])
def test_read_lines_plain_and_gz(tmp_path, name):
    path = write(tmp_path / name, "Grüße\r\n  two  \n\u2028three\u2029 still three\n\nlast")
    assert read_lines(path) == ["Grüße", "  two  ", "\u2028three\u2029 still three", "", "last"]


def test_byte_order_mark_is_dropped(tmp_path):
    assert read_lines(write(tmp_path / "bom.txt", "\ufeffhello\nworld\n")) == ["hello", "world"]


@pytest.mark.parametrize("name", ["bad.txt", "bad.txt.gz"])
def test_invalid_utf8_names_file_and_line(tmp_path, name):
    path = write(tmp_path / name, b"fine\nstill fine\nbroken \xff here\n")
    with pytest.raises(UserError, match=rf"{name}: line 3 is not valid UTF-8 \(byte 0xff"):
        read_lines(path)


def test_missing_file_is_named(tmp_path):
    with pytest.raises(UserError, match=r"file not found: .*nowhere\.de"):
        read_lines(tmp_path / "nowhere.de")
    with pytest.raises(UserError, match=r"file not found: .*nowhere\.en"):
        read_parallel(write(tmp_path / "here.de", "a\n"), tmp_path / "nowhere.en")


def test_a_link_in_a_loop_is_named_as_one(tmp_path):
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    with pytest.raises(UserError, match=r"file not found: .*a \(a symbolic link to a missing "
                       r"file, or in a loop\)"):  # fmt: skip
        read_lines(tmp_path / "a")


def test_a_folder_or_a_pipe_given_as_a_file_says_which(tmp_path):
    with pytest.raises(UserError, match=r"not a file: .* is a folder; give a file$"):
        read_lines(tmp_path)  # (nothing about text to translate: training data is read here too)
    os.mkfifo(tmp_path / "pipe")
    with pytest.raises(UserError, match=r"pipe is a pipe or a device, not a regular file; give"):
        read_lines(tmp_path / "pipe")


def test_a_line_without_end_is_read_no_further_than_the_bound(monkeypatch):
    """An endless line (``/dev/zero``) is refused after its bound, not read into memory."""

    class Endless(io.RawIOBase):
        given = 0

        def readable(self) -> bool:
            return True

        def readinto(self, buffer) -> int:
            buffer[:] = b"a" * len(buffer)
            self.given += len(buffer)
            return len(buffer)

    monkeypatch.setattr(readers, "MAX_LINE_BYTES", 1000)
    endless = Endless()
    with pytest.raises(UserError, match=r"^zeros: line 1 is longer than 1,000 bytes: not a line"):
        next(readers.decoded_lines(io.BufferedReader(endless, 256), "zeros"))
    assert endless.given <= 1024 + 256


def test_corrupt_gzip_is_a_user_error(tmp_path):
    path = tmp_path / "fake.gz"
    path.write_text("not gzip")
    with pytest.raises(UserError, match=r"fake\.gz: cannot read"):
        read_lines(path)


def test_read_parallel_pairs_lines(tmp_path):
    src = write(tmp_path / "a.de.gz", "Hallo Welt\nGuten Morgen\n")
    tgt = write(tmp_path / "a.en", "Hello world\nGood morning\n")
    assert read_parallel(src, tgt) == [
        ("Hallo Welt", "Hello world"),
        ("Guten Morgen", "Good morning"),
    ]


def test_line_counts_that_differ_name_both_files_and_counts(tmp_path):
    src = write(tmp_path / "x.de", "a\nb\nc\n")
    tgt = write(tmp_path / "x.en", "a\nb\n")
    with pytest.raises(UserError, match=r"x\.de has 3 lines, .*x\.en has 2"):
        read_parallel(src, tgt)


def test_tsv_two_and_three_columns_both_directions(tmp_path):
    path = write(tmp_path / "p.tsv", "Go.\tVa !\nHi.\tSalut !\tCC-BY 2.0 (France) Attribution\n")
    assert read_tsv_pairs(path) == [("Go.", "Va !"), ("Hi.", "Salut !")]
    assert read_tsv_pairs(path, first_is_source=False) == [("Va !", "Go."), ("Salut !", "Hi.")]


def test_tsv_line_without_tab_names_file_and_line(tmp_path):
    path = write(tmp_path / "p.txt", "Go.\tVa !\nno tab here\n")
    with pytest.raises(UserError, match=r"p\.txt: line 2 has no tab"):
        read_tsv_pairs(path)


def test_tsv_from_zip_skips_about_file(tmp_path):
    path = tmp_path / "fra-eng.zip"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("_about.txt", "no tabs in here\n")
        archive.writestr("fra.txt", "Go.\tVa !\nRun!\tCours !\n")
    assert read_tsv_pairs(path) == [("Go.", "Va !"), ("Run!", "Cours !")]


def test_zip_errors_name_the_member_or_the_archive(tmp_path):
    path = tmp_path / "two.zip"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("fra.txt", "Go.\tVa !\n")
        archive.writestr("deu.txt", "Go.\tGeh.\n")
    with pytest.raises(UserError, match=r"two\.zip: expected one data file"):
        read_tsv_pairs(path)
    bad = tmp_path / "bad.zip"
    with zipfile.ZipFile(bad, "w") as archive:
        archive.writestr("fra.txt", b"Go.\tVa !\nOK\t\xc3(\n")
    with pytest.raises(UserError, match=r"bad\.zip:fra\.txt: line 2 is not valid UTF-8"):
        read_tsv_pairs(bad)
    write(tmp_path / "junk.zip", "not a zip")
    with pytest.raises(UserError, match=r"junk\.zip: cannot read the zip"):
        read_tsv_pairs(tmp_path / "junk.zip")


def test_empty_pairs_are_dropped_and_counted():
    pairs = [("a", "b"), ("  ", "x"), ("y", ""), ("", ""), (" c ", "d\t")]
    assert drop_empty(pairs) == ([("a", "b"), ("c", "d")], 3)


def numbered_pairs(n):
    return [(f"source {i}", f"target {i}") for i in range(n)]


def test_split_is_reproducible_disjoint_and_sized():
    pairs = numbered_pairs(1000)
    train, valid, test = split_pairs(pairs, 0.1, 0.05, seed=7)
    assert (len(train), len(valid), len(test)) == (850, 100, 50)
    assert set(train) | set(valid) | set(test) == set(pairs)
    assert not set(train) & set(valid) and not set(train) & set(test) and not set(valid) & set(test)
    assert split_pairs(pairs, 0.1, 0.05, seed=7) == (train, valid, test)
    # Same content in another order: same held-out pairs; each split keeps the file order.
    shuffled = pairs[::-1]
    assert [set(s) for s in split_pairs(shuffled, 0.1, 0.05, seed=7)] == [
        set(train),
        set(valid),
        set(test),
    ]
    assert train == sorted(train, key=pairs.index)
    assert set(split_pairs(pairs, 0.1, 0.05, seed=8)[1]) != set(valid)
    # The other direction holds out the same sentences.
    reversed_valid = split_pairs([(t, s) for s, t in pairs], 0.1, 0.05, seed=7)[1]
    assert reversed_valid == [(t, s) for s, t in valid]


def test_repeated_pairs_stay_in_one_split():
    pairs = numbered_pairs(50) * 3
    train, valid, test = split_pairs(pairs, 0.2, 0.2, seed=1)
    assert len(set(valid)) == 10 and len(valid) == 30
    assert not set(train) & set(valid) and not set(train) & set(test)


def test_too_few_pairs_to_split_is_a_clear_error():
    with pytest.raises(UserError, match="2 distinct pairs are too few .*valid_fraction=0.02"):
        split_pairs(numbered_pairs(2), 0.02, 0.01, seed=1)


@pytest.mark.slow
def test_splits_do_not_depend_on_python_hash_seed():
    # str hashes differ between processes; the splits must not. The child has a fixed hash seed,
    # this process a random one (unless PYTHONHASHSEED is set).
    script = (
        "from transformer.config import DataConfig\n"
        "from transformer.data.numbers import numbers_corpus\n"
        "from transformer.data import split_pairs\n"
        "pairs = [(f's{i}', f't{i}') for i in range(300)]\n"
        "print(split_pairs(pairs, 0.1, 0.1, 3)[1])\n"
        "print(numbers_corpus(DataConfig(numbers_train=50, numbers_valid=5, numbers_test=5)))\n"
    )
    child = subprocess.run(
        [sys.executable, "-c", script],
        env={**os.environ, "PYTHONHASHSEED": "4321"},
        capture_output=True,
        text=True,
        check=True,
    )
    pairs = [(f"s{i}", f"t{i}") for i in range(300)]
    here = numbers_corpus(DataConfig(numbers_train=50, numbers_valid=5, numbers_test=5))
    assert child.stdout == f"{split_pairs(pairs, 0.1, 0.1, 3)[1]}\n{here}\n"


def test_load_splits_from_parallel_files_with_fixed_seed(tmp_path):
    src = write(tmp_path / "t.en", "".join(f"line {i}\n" for i in range(200)) + "\n")
    tgt = write(tmp_path / "t.fr", "".join(f"ligne {i}\n" for i in range(200)) + "orphan\n")
    data = replace(FILES, src=str(src), tgt=str(tgt), valid_fraction=0.1, test_fraction=0.05)
    splits = load_splits(data)
    assert (len(splits.train), len(splits.valid), len(splits.test)) == (170, 20, 10)
    assert splits.skipped_empty == 1
    assert "t.en" in splits.source and "t.fr" in splits.source
    assert ("line 7", "ligne 7") in splits.train + splits.valid + splits.test
    assert load_splits(data) == splits


def test_load_splits_with_validation_files_and_tsv(tmp_path):
    train = write(tmp_path / "train.tsv", "".join(f"a{i}\tb{i}\n" for i in range(100)))
    valid = write(tmp_path / "valid.tsv", "v1\tw1\n\t\nv2\tw2\n")
    splits = load_splits(replace(FILES, src=str(train), valid_src=str(valid)))
    assert splits.valid == [("v1", "w1"), ("v2", "w2")]
    # Validation comes from its file; 2% of the training file is still held out for test.
    assert len(splits.train) == 98 and len(splits.test) == 2 and splits.skipped_empty == 1
    assert not set(splits.train) & set(splits.test)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"corpus": "numbers", "src": "x.tsv"}, "data.corpus is 'numbers' but data.src"),
        ({}, "no training data"),
        ({"src": "TRAIN", "valid_tgt": "v.fr"}, r"data.valid_tgt \(v.fr\) is given without"),
        ({"src": "EMPTY"}, "no sentence pairs"),
    ],
)
def test_load_splits_config_mistakes(tmp_path, fields, message):
    train = write(tmp_path / "train.tsv", "a\tb\nc\td\n")
    empty = write(tmp_path / "empty.tsv", "\n \t \n")
    paths = {"TRAIN": str(train), "EMPTY": str(empty)}
    fields = {key: paths.get(value, value) for key, value in fields.items()}
    with pytest.raises(UserError, match=message):
        load_splits(replace(FILES, **fields))


def test_a_pair_and_its_reverse_share_a_split():
    # Keys ignore the direction, so (a, b) and (b, a) can never be trained on and tested on.
    pairs = [(f"x{i}", f"y{i}") for i in range(300)] + [(f"y{i}", f"x{i}") for i in range(300)]
    train, valid, test = split_pairs(pairs, 0.1, 0.1, seed=5)
    for split in (train, valid, test):
        assert {(b, a) for a, b in split} == set(split)
    assert len(valid) == len(test) == 60  # a tenth of the 300 distinct keys, both directions


def test_the_split_plan_streams_in_eight_bytes_a_pair():
    from transformer.data.splits import plan_split

    pairs = [(f"s{i}", f"t{i}") for i in range(1000)]
    plan = plan_split(iter(pairs), 0.05, 0.05, seed=1)  # one pass over an iterator
    counts = [sum(plan.split_of(p) == k for p in pairs) for k in range(3)]
    assert counts == [900, 50, 50]


def test_a_split_by_source_holds_out_every_translation_of_a_held_out_source():
    """Several translations per source, and sources that differ only in case and spaces: none
    of a held-out source's forms is trained on, and its translations stay together."""
    from transformer.data.splits import normalised

    pairs = [(f"Source {i}.", f"target {i} {k}") for i in range(300) for k in range(i % 3 + 1)]
    pairs += [(f"source  {i}.", f"other {i}") for i in range(0, 300, 7)]  # a case/space variant
    train, valid, test = split_pairs(pairs, 0.1, 0.1, seed=3, by_source=True)
    assert len(train) + len(valid) + len(test) == len(pairs)
    trained = {normalised(s) for s, _ in train}
    for held in (valid, test):
        assert held and not {normalised(s) for s, _ in held} & trained
    by_split = {}
    for name, part in (("train", train), ("valid", valid), ("test", test)):
        for source, _ in part:
            by_split.setdefault(normalised(source), set()).add(name)
    assert all(len(names) == 1 for names in by_split.values())
    assert 20 <= len({normalised(s) for s, _ in test}) <= 40  # 10% of 300 distinct sources
    # split by pair (the default), a source's translations can be dealt apart
    train, valid, test = split_pairs(pairs, 0.1, 0.1, seed=3)
    assert {normalised(s) for s, _ in test} & {normalised(s) for s, _ in train}
