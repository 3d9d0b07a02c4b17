"""Confidence (inference/confidence.py) and ``--output_format jsonl`` / ``--flag_below``: the
sentence log-probability and the words' probabilities checked against the search's own score
and against ``score`` (a separate pass, score.py); bad thresholds refused before any work."""

from __future__ import annotations

import json
import math
import re

import pytest

from transformer.config import DecodeConfig
from transformer.errors import UserError
from transformer.inference.confidence import flagged, words_of
from transformer.inference.texts import translate_texts

from helpers import cli_main, one_line_error

LINES = ["twelve", "", "four hundred seven", "ninety nine", "one thousand"]


def jsonl(model, *extra: str, tmp_path) -> list[dict]:
    (tmp_path / "in.txt").write_text("".join(line + "\n" for line in LINES))
    done = cli_main("translate", str(model), "--output_format", "jsonl", "-i",
                    str(tmp_path / "in.txt"), "--device", "cpu", *extra)  # fmt: skip
    assert done.code == 0, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines()]


@pytest.mark.slow
def test_jsonl_is_one_object_per_line_with_the_search_s_log_probability(numbers_model, tmp_path):
    records = jsonl(numbers_model, "--decode.beam_size", "1", tmp_path=tmp_path)
    assert [(r["line"], r["source"]) for r in records] == list(enumerate(LINES, 1))
    for r in records[:1] + records[2:]:
        # greedy search's score is the log-probability of what it wrote (search.py); the
        # teacher-forced pass of confidence.py must find the same number
        assert r["log_prob"] == pytest.approx(r["score"], abs=1e-4)
        assert " ".join(w["word"] for w in r["words"]) == r["text"]
        assert all(0 < w["prob"] <= 1 for w in r["words"])
        # the words' probabilities and </s>'s make up the sentence's
        assert sum(math.log(w["prob"]) for w in r["words"]) >= r["log_prob"] - 1e-4
    assert records[1]["text"] == "" and records[1]["words"] == []


@pytest.mark.slow
def test_the_log_probability_is_the_one_score_gives(torch_engine):
    # ``score`` reads the text, and SentencePiece may cut a decoded text into other pieces than
    # the search's (pieces [55, 57] decode to "t", which encodes as [14]): compared where the
    # text's pieces are the search's.
    found = translate_texts(torch_engine, LINES[2:], confidence=True).texts
    searched = torch_engine.translate(LINES[2:], torch_engine.decode).nbest
    scored = torch_engine.score(LINES[2:], [t.text for t in found])
    compared = 0
    for t, hyps, s in zip(found, searched, scored.scores, strict=True):
        assert t.text == hyps[0].text
        if torch_engine.tokenizers.tgt.encode(t.text) == hyps[0].tokens:
            assert t.sentences[0].confidence.log_prob == pytest.approx(s.log_prob, abs=1e-4)
            compared += 1
    assert compared, "no text came back as the search's pieces"


@pytest.mark.slow
def test_alignments_come_in_jsonl_when_asked(numbers_model, tmp_path):
    records = jsonl(numbers_model, "--decode.alignment", tmp_path=tmp_path)
    assert all(re.fullmatch(r"(\d+-\d+( \d+-\d+)*)?", r["alignment"]) for r in records)


@pytest.mark.slow
def test_flag_below_marks_exactly_the_words_under_the_threshold(numbers_model, tmp_path):
    records = jsonl(numbers_model, tmp_path=tmp_path)
    probs = sorted({w["prob"] for r in records for w in r["words"]})
    k = len(probs) // 2
    threshold = (probs[k - 1] + probs[k]) / 2  # about half the words are under it, none at it
    done = cli_main("translate", str(numbers_model), "-i", str(tmp_path / "in.txt"),
                    "--device", "cpu", "--flag_below", str(threshold))  # fmt: skip
    assert done.code == 0, done.stderr
    for line, r in zip(done.stdout.splitlines(), records, strict=True):
        want = " ".join(f"[[{w['word']}]]" if w["prob"] < threshold else w["word"]
                        for w in r["words"])  # fmt: skip
        assert line == want


def test_flagged_marks_words_in_place():
    words = words_of([1, 2, 3], [math.log(0.9), math.log(0.5), math.log(0.2), 0.0], Pieces())
    assert [(w.word, round(w.prob, 6)) for w in words] == [("un", 0.45), ("deux", 0.2)]
    assert flagged("un deux", words, 0.3) == "un [[deux]]"
    assert flagged("un deux", words, 0.5) == "[[un]] [[deux]]"


class Pieces:
    """Three pieces: "▁u" "n" (one word, "un") and "▁deux"."""

    pieces = {1: "\u2581u", 2: "n", 3: "\u2581deux"}

    def id_to_piece(self, i):
        return self.pieces[i]

    def decode(self, ids):
        return "".join(self.pieces[i] for i in ids).replace("\u2581", " ").strip()


@pytest.mark.slow
@pytest.mark.parametrize("value", ["0", "1.5", "-0.25", "nan", "inf", "often"])
def test_a_bad_flag_below_is_one_line_and_nothing_is_written(numbers_model, tmp_path, value):
    (tmp_path / "in.txt").write_text("twelve\n")
    out = tmp_path / "out.txt"
    done = cli_main("translate", str(numbers_model), "-i", str(tmp_path / "in.txt"), "-o",
                    str(out), f"--flag_below={value}")  # fmt: skip
    one_line_error(done, 2, "flag_below")
    assert not out.exists()


@pytest.mark.slow
def test_several_translations_per_sentence_are_refused_with_jsonl(torch_engine):
    with pytest.raises(UserError, match="nbest 2"):
        translate_texts(torch_engine, ["one"], DecodeConfig(beam_size=2, nbest=2), confidence=True)
