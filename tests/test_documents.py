"""Documents (inference/documents.py, inference/texts.py): paragraphs split into sentences and put
back with order, breaks and leading whitespace as given; sentences too long for the model split,
never cut. A stub engine whose "translation" is the sentence upper-cased and wrapped in <...>
shows exactly which text went in as which sentence; the command line runs the tiny trained
model."""

from __future__ import annotations

import gzip
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

import pytest

from transformer.config import DecodeConfig
from transformer.inference.documents import fit, read_document
from transformer.inference.texts import translate_texts
from transformer.inference.translation import Translation, TranslationResult

from helpers import cli_main, one_line_error

DATA = Path("/work/shared/data") if Path("/work/shared/data").is_dir() else Path("../shared/data")


@dataclass
class UpperEngine:
    """Translates a sentence into <ITS TEXT UPPER-CASED>; a piece is a word, </s> one more."""

    max_positions: int = 1000
    calls: list[list[str]] = field(default_factory=list)
    decode = DecodeConfig()
    name = "upper"

    def __post_init__(self):
        tokenizer = SimpleNamespace(encode=lambda text: text.split())
        self.tokenizers = SimpleNamespace(src=tokenizer, tgt=tokenizer)
        self.config = SimpleNamespace(model=SimpleNamespace(max_positions=self.max_positions),
                                      data=SimpleNamespace(src_lang="en"))  # fmt: skip

    def translate(self, sentences, decode=None, prefixes=None, stopped=None):
        self.calls.append(list(sentences))
        return TranslationResult([[Translation(f"<{s.upper()}>", -1.0, [])] for s in sentences], [])


def paragraph(k: int) -> list[str]:
    return [f"Paragraph {k} says {word}." for word in ("one", "two", "three", "four", "five")]


def test_three_paragraphs_of_five_sentences_come_back_as_three_of_five_in_one_call():
    paragraphs = [paragraph(k) for k in (1, 2, 3)]
    text = ("  " + " ".join(paragraphs[0]) + "\n\n\n\t" + " ".join(paragraphs[1][:2]) + "\n"
            + " ".join(paragraphs[1][2:]) + "\n \n" + "  ".join(paragraphs[2]))  # fmt: skip
    engine = UpperEngine()
    found = translate_texts(engine, [text], document=True).texts[0]
    assert len(engine.calls) == 1 and len(engine.calls[0]) == 15
    assert [len(p[3]) for p in found.paragraphs] == [5, 5, 5]
    up = [[f"<{s.upper()}>" for s in p] for p in paragraphs]
    want = ("  " + " ".join(up[0]) + "\n\n\n\t" + " ".join(up[1][:2]) + "\n"
            + " ".join(up[1][2:]) + "\n \n" + "  ".join(up[2]))  # fmt: skip
    assert found.text == want
    assert [p[0] for p in found.paragraphs] == [1, 4, 7]  # the line each paragraph starts on


def test_a_hard_wrapped_sentence_is_one_sentence():
    doc = read_document("A sentence that\nwraps onto the next line. Then another.\n", "en")
    assert [s.text for s in doc.sentences] == ["A sentence that wraps onto the next line.",
                                               "Then another."]  # fmt: skip
    assert [s.line for s in doc.sentences] == [1, 2]


@pytest.mark.parametrize(
    "text", ["See http://example.com/a.b?c=d today.", "Hi!!!Yes.", "one?two!three."]
)
def test_a_sentence_ends_only_where_a_space_follows(text):
    # pysbd cuts "a.b?c=d" after "?" and "Hi!!!Yes." inside "!!!": two translations written
    # with nothing between them would read as one word
    doc = read_document(text, "en")
    assert [s.text for s in doc.sentences] == [text]
    found = translate_texts(UpperEngine(), [text], document=True).texts[0]
    assert found.text == f"<{text.upper()}>"


def test_an_empty_document_and_one_of_blank_lines_translate_to_themselves():
    engine = UpperEngine()
    for text in ("", "\n\n  \n"):
        assert translate_texts(engine, [text], document=True).texts[0].text == text


@pytest.mark.skipif(not (DATA / "multi30k").is_dir(), reason="needs the Multi30k files")
def test_no_sentence_of_1000_multi30k_lines_in_paragraphs_is_dropped():
    with gzip.open(DATA / "multi30k" / "test_2016_flickr.en.gz", "rt", encoding="utf-8") as f:
        lines = [line.strip() for line in f][:1000]
    text = "\n\n".join(" ".join(lines[i : i + 5]) for i in range(0, len(lines), 5))
    engine = UpperEngine()
    found = translate_texts(engine, [text], document=True).texts[0]
    assert len(engine.calls) == 1
    # every character of every line comes back, in order: only whole sentences were wrapped
    assert found.text.replace("<", "").replace(">", "") == text.upper()
    assert len(found.paragraphs) == 200
    # each line starts a sentence, except where the line before it has no full stop
    starts = sum(1 for s in found.sentences if s.source)
    unmarked = sum(1 for i, line in enumerate(lines) if i % 5 != 4 and line[-1] not in ".!?")
    assert starts >= 1000 - unmarked


def test_each_sentence_knows_its_line_and_many_sentences_take_linear_time():
    """A paragraph of 8,000 sentences "Twelve." took 8.4 s to read (pysbd searched for each
    sentence from the paragraph's start), 100,000 more than 5 minutes; lines were counted from
    the document's start for every sentence."""
    import time

    text = "\n\n".join(" ".join(["Twelve."] * 10) + "\nThirteen." for _ in range(3))
    found = read_document(text, "en")
    expected = [1] * 10 + [2] + [4] * 10 + [5] + [7] * 10 + [8]
    assert [s.line for s in found.sentences] == expected
    assert [s.text for s in found.sentences] == (["Twelve."] * 10 + ["Thirteen."]) * 3
    start = time.perf_counter()
    assert len(read_document(" ".join(["Twelve."] * 40_000), "en").sentences) == 40_000
    assert time.perf_counter() - start < 8  # 0.8 s here; pysbd's own search: minutes


def words(n: int) -> list[str]:
    return [f"w{i}" for i in range(n)]


def test_a_sentence_too_long_is_split_at_punctuation_and_keeps_every_word():
    sentence = " ".join(words(6)) + ", " + " ".join(words(6)) + "; " + " ".join(words(3))
    fitted = fit(sentence, lambda t: len(t.split()) + 1, 8)  # at most 7 words a part
    assert fitted.how == "at punctuation"
    assert fitted.parts == [" ".join(words(6)) + ",", " ".join(words(6)) + ";",
                            " ".join(words(3))]  # fmt: skip
    assert fitted.pieces == 16  # 15 words and </s>


def test_without_punctuation_it_is_split_into_windows_of_whole_words_or_characters():
    sentence = " ".join(words(20))
    fitted = fit(sentence, lambda t: len(t.split()) + 1, 8)
    assert fitted.how == "at a fixed window"
    assert [len(p.split()) for p in fitted.parts] == [7, 7, 6]
    assert " ".join(fitted.parts) == sentence
    long_word = "x" * 25
    fitted = fit(long_word, lambda t: len(t) + 1, 11)  # a piece per character: 10 a part
    assert fitted.parts == ["x" * 10, "x" * 10, "x" * 5]


def test_a_split_sentence_comes_back_as_one_with_the_line_it_was_on():
    long = " ".join(words(30)) + "."
    text = "Short one. Another.\n\nFirst. " + long + " Last one."
    engine = UpperEngine(max_positions=12)
    found = translate_texts(engine, [text], document=True)
    assert [(s.line, s.parts, s.how) for s in found.splits] == [(3, 3, "at a fixed window")]
    sentences = found.texts[0].sentences
    assert len(sentences) == 5 and sentences[3].split == "at a fixed window"
    assert sentences[3].text.replace("<", "").replace(">", "") == long.upper()
    assert all(len(part.split()) + 1 <= 12 for part in engine.calls[0])


# ------------------------------------------------------------------- the command line, for real
@pytest.mark.slow
def test_translate_document_keeps_the_paragraphs(numbers_model, tmp_path):
    text = "  twelve. seven. one hundred. forty two. nine.\n\n\nthree. eight. ten. two. six.\n" \
           "\n\tfive. four. eleven. twenty. thirty.\n"  # fmt: skip
    (tmp_path / "in.txt").write_text(text)
    out = tmp_path / "out.txt"
    done = cli_main("translate", str(numbers_model), "--document", "-i", str(tmp_path / "in.txt"),
                    "-o", str(out), "--device", "cpu")  # fmt: skip
    assert done.code == 0, done.stderr
    got = out.read_text()
    skeleton = [re.match(r"\s*", line).group() if line.strip() else line
                for line in got.split("\n")]  # fmt: skip
    assert skeleton == ["  ", "", "", "", "", "\t", ""]  # breaks and leading whitespace kept
    done = cli_main("translate", str(numbers_model), "--document", "--output_format", "jsonl",
                    "-i", str(tmp_path / "in.txt"), "--device", "cpu")  # fmt: skip
    records = [json.loads(line) for line in done.stdout.splitlines()]
    assert [(r["paragraph"], r["line"], len(r["sentences"])) for r in records] == [
        (1, 1, 5), (2, 4, 5), (3, 6, 5)]  # fmt: skip
    assert all(s["text"] for r in records for s in r["sentences"])


@pytest.mark.slow
def test_a_document_with_a_sentence_too_long_for_the_model_is_split_and_said(numbers_model,
                                                                          tmp_path):  # fmt: skip
    long = " ".join(["seven hundred seventy seven"] * 20)  # > 48 pieces: max_positions
    (tmp_path / "in.txt").write_text(f"one. two.\n\n{long}. three.\n")
    done = cli_main("translate", str(numbers_model), "--document", "--output_format", "jsonl",
                    "-i", str(tmp_path / "in.txt"), "--device", "cpu")  # fmt: skip
    assert done.code == 0
    assert len(done.stderr) == 1 and "line 3:" in done.stderr[0] and "split" in done.stderr[0]
    second = json.loads(done.stdout.splitlines()[1])["sentences"]
    assert second[0]["split"] == "at a fixed window" and second[1]["source"] == "three."


@pytest.mark.slow
@pytest.mark.parametrize("data", [b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", b"one\ntwo\x00three\n"])
def test_binary_input_is_one_line_and_nothing_is_written(numbers_model, tmp_path, data):
    (tmp_path / "in.bin").write_bytes(data)
    out = tmp_path / "out.txt"
    for extra in ([], ["--document"], ["--output_format", "jsonl"]):
        done = cli_main("translate", str(numbers_model), *extra, "-i", str(tmp_path / "in.bin"),
                        "-o", str(out), "--device", "cpu")  # fmt: skip
        one_line_error(done, 2, "in.bin", "line")
        assert not out.exists()
