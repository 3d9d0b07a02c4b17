"""``transformer compare``: the report of two tiny runs, each figure checked against a second way
of getting it, and bad input refused in one line before any work, with nothing overwritten."""

import json
import shutil
import statistics
from pathlib import Path

import pytest
import torch
from sacrebleu.metrics import BLEU

from transformer.data import load_splits
from transformer.data.batching import make_batches
from transformer.data.binarized import TokenDataset
from transformer.inspect.compare import length_buckets
from transformer.model_dir.checkpoints import load_checkpoint
from transformer.model_dir.runs import RunDir, read_metrics

from helpers import cli, snapshot


@pytest.fixture
def one_thread():
    """Torch on one thread for the test (see test_rnn.one_thread); restored after."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def one_line(code: int, err: str, *needles: str) -> None:
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    for needle in needles:
        assert needle in lines[0], lines[0]


@pytest.mark.parametrize(
    "lengths",
    [[1] * 5 + [2] * 40 + [5, 6, 7, 9, 9, 12], list(range(1, 101)), [4, 4, 4], [3, 1, 2]],
)
def test_length_buckets_cover_every_length_once_in_order(lengths):
    buckets = length_buckets(lengths, 4)
    assert 1 <= len(buckets) <= 4
    assert buckets[0][0] == min(lengths) and buckets[-1][1] == max(lengths)
    for (_, high), (low, _) in zip(buckets, buckets[1:], strict=False):
        assert low == high + 1  # contiguous, no overlap
    for n in lengths:
        assert sum(low <= n <= high for low, high in buckets) == 1
    if len(set(lengths)) >= 4 and len(lengths) >= 100:  # quantiles: no bucket holds most
        counts = [sum(low <= n <= high for n in lengths) for low, high in buckets]
        assert max(counts) <= len(lengths) / 2


@pytest.mark.slow
def test_compare_writes_the_report_with_figures_that_agree_with_other_paths(
    numbers_model, rnn_numbers_model, tmp_path, capsys, one_thread
):
    out = tmp_path / "report"
    runs = [str(numbers_model), str(rnn_numbers_model)]
    code, said, err = cli(["compare", *runs, "--out", str(out), "--beam_size", "1"], capsys)
    assert code == 0, err
    assert "report:" in said
    for plot in ("bleu_by_length", "forward_time", "training_speed"):
        assert (out / f"{plot}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert (out / f"{plot}.svg").read_text().lstrip().startswith("<?xml")
    numbers = json.loads((out / "compare.json").read_text())
    report = (out / "report.md").read_text()
    assert numbers["sentences"] == 30 and sum(numbers["bucket_sizes"]) == 30
    assert [run["model"] for run in numbers["runs"]] == [
        "Transformer (d 32, 2+2)", "GRU + Bahdanau attention"
    ]  # fmt: skip
    for run, path in zip(numbers["runs"], runs, strict=True):
        assert f"| {run['name']} |" in report
        # BLEU over all buckets = what `evaluate` reports with the same search.
        code, said, _ = cli(["evaluate", path, "--beam_size", "1", "--output",
                             str(tmp_path / "test.hyp")], capsys)  # fmt: skip
        assert code == 0 and f"BLEU = {run['bleu']:.2f}" in said
        loaded = load_checkpoint(Path(path))
        # Each bucket's BLEU = sacreBLEU (effective order) on evaluate's hypotheses in it.
        hypotheses = (tmp_path / "test.hyp").read_text().splitlines()
        test = load_splits(loaded.config.data).test
        for (low, high), score in zip(numbers["buckets"], run["bucket_bleu"], strict=True):
            rows = [i for i, (s, _) in enumerate(test) if low <= len(s.split()) <= high]
            references = [[test[i][1] for i in rows]]
            expected = BLEU(effective_order=True).corpus_score([hypotheses[i] for i in rows],
                                                               references)  # fmt: skip
            assert score == pytest.approx(expected.score)
        assert run["parameters"] == sum(p.numel() for p in loaded.model.parameters())
        assert len(run["bucket_bleu"]) == len(numbers["buckets"])
        assert len(run["forward_ms"]) == len(numbers["lengths"])
        # Speed from the log, and an epoch's padded tokens counted batch by batch.
        rows = read_metrics(Path(path))
        rate = statistics.median(r["tokens_per_s"] for r in rows if "tokens_per_s" in r)
        assert run["tokens_per_s"] == pytest.approx(rate)
        dataset = TokenDataset.open(RunDir(path).data)
        train = loaded.config.train
        batches = make_batches(dataset, train.max_tokens, train.seed, 0)
        tokens = sum(dataset.batch(b).n_padded for b in batches)
        assert run["seconds_per_epoch"] == pytest.approx(tokens / rate)
    assert any(score > 0 for run in numbers["runs"] for score in run["bucket_bleu"])  # not vacuous
    # Again into the same folder: an earlier report is replaced.
    before = snapshot(out)
    code, _, err = cli(["compare", *runs, "--out", str(out), "--beam_size", "1"], capsys)
    assert code == 0, err
    assert snapshot(out).keys() == before.keys()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no leftovers


@pytest.mark.slow
def test_bad_input_is_a_one_line_error_before_any_work(
    numbers_model, rnn_numbers_model, tmp_path, capsys
):
    runs = [str(numbers_model), str(rnn_numbers_model)]
    # A folder of the user's that is not a report: refused, untouched.
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me")
    before = snapshot(mine)
    code, _, err = cli(["compare", *runs, "--out", str(mine)], capsys)
    one_line(code, err, str(mine), "not empty")
    assert snapshot(mine) == before
    out = str(tmp_path / "out")
    # Not a run at all; a model directory without its training log.
    code, _, err = cli(["compare", str(numbers_model), str(tmp_path), "--out", out], capsys)
    one_line(code, err, str(tmp_path), "no checkpoint")
    bare = tmp_path / "bare"
    shutil.copytree(rnn_numbers_model, bare, ignore=shutil.ignore_patterns("metrics.jsonl"))
    code, _, err = cli(["compare", str(numbers_model), str(bare), "--out", out], capsys)
    one_line(code, err, str(bare), "metrics.jsonl")
    # A run on other data: the same corpus split with another seed.
    other = tmp_path / "other"
    shutil.copytree(rnn_numbers_model, other)
    for config in other.rglob("config.json"):
        values = json.loads(config.read_text())
        values["data"]["split_seed"] += 1
        config.write_text(json.dumps(values))
    code, _, err = cli(["compare", str(numbers_model), str(other), "--out", out], capsys)
    one_line(code, err, "different test sets")
    code, _, err = cli(["compare", str(numbers_model), str(numbers_model), "--out", out], capsys)
    one_line(code, err, "given twice")
    assert not (tmp_path / "out").exists()
