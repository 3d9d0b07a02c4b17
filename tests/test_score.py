"""Scoring given pairs (inference/score.py, ``transformer score``): a beam hypothesis scores what
the beam reported for it, ours agrees with CTranslate2's ``score_batch``, a pair alone scores as
in a padded batch, and the command line's lines, output file and errors."""

import math

import pytest

from transformer.config import DecodeConfig, RuntimeConfig
from transformer.data.batching import encode_source
from transformer.data.corpora import load_splits
from transformer.errors import UserError
from transformer.inference import translate_ids
from transformer.inference.engine import load_torch_engine
from transformer.inference.score import score_ids
from transformer.inference.search import gnmt_length_penalty

from helpers import cli


@pytest.fixture(scope="module")
def engine(numbers_model):
    return load_torch_engine(numbers_model, runtime=RuntimeConfig(device="cpu"))


@pytest.fixture(scope="module")
def pairs(engine) -> tuple[list[str], list[str]]:
    test = load_splits(engine.config.data).test
    return [s for s, _ in test], [t for _, t in test]


@pytest.mark.parametrize("alpha", [0.0, 0.6])
def test_a_beam_hypothesis_scores_what_the_beam_reported(engine, pairs, alpha):
    ids = [encode_source(engine.tokenizers.src.encode(s)) for s in pairs[0]]
    nbest = translate_ids(
        engine.model, ids, DecodeConfig(beam_size=4, nbest=4, length_penalty=alpha)
    )
    sources = [src for src, hyps in zip(ids, nbest, strict=True) for _ in hyps]
    hyps = [h for hyps in nbest for h in hyps]
    totals = score_ids(engine.model, sources, [h.tokens for h in hyps])
    # Within 1e-5, or 1e-6 relatively: the float32 sums of a 48-token output (one run to the
    # limit) were 1.5e-5 apart.
    for h, total in zip(hyps, totals, strict=True):
        assert total == pytest.approx(h.log_prob, abs=1e-5, rel=1e-6)
        assert total / gnmt_length_penalty(len(h.tokens) + 1, alpha) == pytest.approx(
            h.score, abs=1e-5, rel=1e-6
        )
    # Through the text too, where the text reads back as the same pieces.
    tgt = engine.tokenizers.tgt
    texts = [(pairs[0][i], h) for i, hs in enumerate(nbest) for h in hs]
    again = [(s, h) for s, h in texts if tgt.encode(tgt.decode(h.tokens)) == h.tokens]
    found = engine.score([s for s, _ in again], [tgt.decode(h.tokens) for _, h in again],
                         DecodeConfig(length_penalty=alpha)).scores  # fmt: skip
    assert len(found) >= 50
    for (_, h), p in zip(again, found, strict=True):
        assert p.penalised == pytest.approx(h.score, abs=1e-5, rel=1e-6)
        assert p.tokens == len(h.tokens) + 1 and p.per_token == pytest.approx(p.log_prob / p.tokens)


def test_a_pair_alone_scores_as_in_a_padded_batch(engine):
    sources = [[5, 6, 7, 8, 9, 3], [10, 3], [12, 13, 14, 15, 3], [20, 21, 3]]
    targets = [[7, 8], [9, 10, 11, 12, 13, 14], [], [15]]
    together = score_ids(engine.model, sources, targets)
    for src, tgt, total in zip(sources, targets, together, strict=True):
        assert score_ids(engine.model, [src], [tgt])[0] == pytest.approx(total, abs=1e-5)
    assert math.isfinite(together[2])  # an empty target: EOS alone
    # and one batch at a time, whatever its size
    single = score_ids(engine.model, sources, targets, batch_size=1)
    assert single == pytest.approx(together, abs=1e-5)


def test_ours_and_ctranslate2s_score_batch_agree(numbers_model, pairs):
    pytest.importorskip("ctranslate2")
    from transformer.inference.ctranslate2 import load_ctranslate2

    ours = load_torch_engine(numbers_model).score(*pairs).scores
    theirs = load_ctranslate2(numbers_model).score(*pairs).scores
    assert len(ours) == len(theirs) == len(pairs[0])
    for a, b in zip(ours, theirs, strict=True):
        assert (a.tokens, a.log_prob) == (b.tokens, pytest.approx(b.log_prob, abs=1e-4))
        assert a.penalised == pytest.approx(b.penalised, abs=1e-4)


def test_misaligned_lists_and_too_long_targets_are_errors(engine):
    with pytest.raises(UserError, match="2 sources but 1 targets"):
        engine.score(["one", "two"], ["un"])
    with pytest.raises(UserError, match="target 1 has"):
        engine.score(["one"], [" ".join(["quatre-vingt-dix-neuf"] * 30)])


def test_the_score_command_names_the_line_of_a_reference_too_long(numbers_model, tmp_path, capsys):
    (tmp_path / "src.txt").write_text("twelve\nforty two\n")
    (tmp_path / "ref.txt").write_text("douze\n" + "quatre-vingt-dix-neuf " * 30 + "\n")
    code, out, err = cli(["score", str(numbers_model), "--src", str(tmp_path / "src.txt"),
                          "--ref", str(tmp_path / "ref.txt")], capsys)  # fmt: skip
    assert code == 2 and out == "" and err.count("\n") == 1
    assert f"{tmp_path / 'ref.txt'}, line 2: the reference has" in err, err


def test_the_score_command(numbers_model, tmp_path, capsys):
    (tmp_path / "src.txt").write_text("twelve\nforty two\n\n")
    (tmp_path / "ref.txt").write_text("douze\nquarante-deux\n\n")
    code, out, err = cli(["score", str(numbers_model), "--src", str(tmp_path / "src.txt"),
                          "--ref", str(tmp_path / "ref.txt")], capsys)  # fmt: skip
    assert code == 0, err
    rows = [[float(x) for x in line.split("\t")] for line in out.strip().split("\n")]
    assert len(rows) == 3 and all(len(row) == 3 for row in rows)
    tgt = load_torch_engine(numbers_model).tokenizers.tgt
    for (total, per_token, penalised), ref in zip(
        rows, ["douze", "quarante-deux", ""], strict=True
    ):
        n = len(tgt.encode(ref)) + 1
        assert per_token == pytest.approx(total / n, abs=1e-5)
        assert penalised == pytest.approx(total / ((5 + n) / 6) ** 0.6, abs=1e-5)
    code, _, err = cli(["score", str(numbers_model), "--src", str(tmp_path / "src.txt"),
                        "--ref", str(tmp_path / "ref.txt"), "-o", str(tmp_path / "out.tsv")],
                       capsys)  # fmt: skip
    assert code == 0 and (tmp_path / "out.tsv").read_text() == out


@pytest.mark.parametrize(("src", "ref", "words"), [
    ("twelve\nforty\n", "douze\n", ["line counts differ", "has 2 lines", "has 1"]),
    ("", "", ["nothing to score"]),
])  # fmt: skip
def test_the_score_command_refuses_bad_files_in_one_line(numbers_model, tmp_path, capsys, src, ref,
                                                         words):  # fmt: skip
    (tmp_path / "src.txt").write_text(src)
    (tmp_path / "ref.txt").write_text(ref)
    code, out, err = cli(["score", str(numbers_model), "--src", str(tmp_path / "src.txt"),
                          "--ref", str(tmp_path / "ref.txt"), "-o", str(tmp_path / "o")],
                         capsys)  # fmt: skip
    assert code == 2 and out == "" and err.count("\n") == 1, err
    assert all(word in err for word in words), err
    assert not (tmp_path / "o").exists()
    code, _, err = cli(["score", str(numbers_model), "--src", str(tmp_path / "src.txt"),
                        "--ref", str(tmp_path / "ref.txt"), "-o", str(tmp_path / "src.txt")],
                       capsys)  # fmt: skip
    assert code == 2 and (tmp_path / "src.txt").read_text() == src
