"""The benchmark scripts still run against the library as it is (they are run by hand, so a
change to an API they call would otherwise show only when someone next measures)."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


def _bench(script: str, *args: str, timeout: int = 600) -> str:
    command = [sys.executable, str(BENCHMARKS / script), *args]
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, cwd=BENCHMARKS)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def test_translate_speed_runs_a_trained_model_on_its_test_split(numbers_model, tmp_path):
    out = tmp_path / "table.md"
    _bench("translate_speed.py", "--model", str(numbers_model), "--settings", "run",
           "--engines", "torch,torch-serial", "--threads", "1", "--rounds", "1", "--limit", "6",
           "--markdown", str(out))  # fmt: skip
    table = out.read_text()
    assert "its test split (6 sentences)" in table
    for search in ("greedy", "beam 4"):  # each engine's row, with its BLEU and outputs compared
        assert f"| {search} | torch | " in table and f"| {search} | torch-serial | " in table
    assert table.count("| 6/6 |") == 4  # one batch at a time gives the same outputs


def test_the_fixed_setting_runs_our_model_as_translate_does():
    """EOS is held back in the model's own output layer, which is packed as `transformer
    translate` packs it on a CPU: a wrapper around the model left the vocabulary's product
    unpacked, and the fixed-length tables measured that instead."""
    import argparse

    import torch

    sys.path.insert(0, str(BENCHMARKS))
    from translate_speed import engine_model

    from transformer.inference.next_tokens import BLOCK
    from transformer.model.linear import can_pack, packed_rows
    from transformer.vocab import EOS_ID

    args = argparse.Namespace(engine="torch", setting="fixed", size="small", seed=1)
    model = engine_model(args, torch.device("cpu"))
    assert model.output.bias[EOS_ID] < -1e3  # EOS held back: only the length limit ends
    if can_pack():
        vocab = model.config.tgt_vocab_size
        assert packed_rows(model.output) == -(-vocab // BLOCK) * BLOCK


def test_profile_decode_counts_onednn_products_and_packs_as_translate_does(tmp_path):
    """The profile's report groups oneDNN's products (``mkldnn::_linear_pointwise``) with the
    other matrix products; the layers are packed unless ``--no-pack``."""
    out = tmp_path / "profile.md"
    _bench("profile_decode.py", "--sizes", "small", "--searches", "greedy", "--sentences", "4",
           "--steps", "3", "--rounds", "1", "--top", "40", "--report", str(out))  # fmt: skip
    report = out.read_text()
    assert "weights packed" in report
    from transformer.model.linear import can_pack

    if can_pack():  # the packed layers multiply through oneDNN: counted, and as products
        assert "| `mkldnn::_linear_pointwise` |" in report
        products = re.search(r"\| matrix products[^|]*\| ([\d.]+)% \|", report)
        assert products and float(products.group(1)) > 20, report


def test_the_scripts_the_gpu_checks_time_run_with_their_options_on_the_cpu(tmp_path):
    """benchmarks/gpu_checks.sh's timed parts (speed, profile, decode) run only where a GPU is
    lent, which is rare: their options and code paths are run here on the CPU, at toy sizes, so
    that the GPU's few minutes are not lost to an option or an API that changed."""
    checks = (BENCHMARKS / "gpu_checks.sh").read_text()
    for used in ("train_speed.py --device cuda --preset base --batch 400 --steps 20 --rounds 3 "
                 "--no-compile --report", "profile_step.py --device cuda --preset base",
                 "decode_speed.py --device cuda --preset base"):  # fmt: skip
        assert used in " ".join(checks.replace("\\\n", " ").split()), used
    speed = tmp_path / "train_speed.md"
    _bench("train_speed.py", "--device", "cpu", "--preset", "small", "--batch", "4",
           "--steps", "1", "--rounds", "1", "--no-compile", "--report", str(speed))  # fmt: skip
    table = speed.read_text()
    for model in ("ours", "nn.Transformer"):
        assert re.search(rf"\| {re.escape(model)} \| fp32 \| no \| [\d,]+ \|", table), table
    assert re.search(r"ours / nn.Transformer, fp32, compile False: [\d.]+x", table)
    profile = tmp_path / "profile_step.md"
    _bench("profile_step.py", "--device", "cpu", "--preset", "small", "--batch", "4",
           "--precision", "bf16", "--models", "ours,nn.Transformer", "--steps", "1",
           "--rounds", "1", "--trace", str(tmp_path / "trace"),
           "--report", str(profile))  # fmt: skip
    assert "| ours | " in profile.read_text() and "| nn.Transformer | " in profile.read_text()
    assert (tmp_path / "trace" / "trace_ours_bf16.json").stat().st_size > 0
    decode = _bench("decode_speed.py", "--device", "cpu", "--preset", "small", "--vocab", "500",
                    "--sentences", "4", "--batch-size", "2", "--repeats", "1")  # fmt: skip
    assert re.search(r"greedy +yes +[\d.]+", decode) and re.search(r"beam 4 +no +[\d.]+", decode)


def test_the_gpu_profile_lists_each_kernel_once_and_every_row_of_at_least_1_percent(monkeypatch):
    """profile_step.py's GPU tables (run only where a GPU is lent): from host-side operators or
    from kernels, never both in one table, rows of at least 1% of the busy time, largest first."""
    from types import SimpleNamespace

    monkeypatch.syspath_prepend(str(BENCHMARKS))
    from profile_step import _largest

    def events(*times: float) -> list:
        return [
            SimpleNamespace(key=f"op{i}", self_device_time_total=t) for i, t in enumerate(times)
        ]

    rows = _largest(events(5.0, 500.0, 9.9, 300.0, 20.0, 0.0, 10.0), busy_us=1000.0)
    assert [e.self_device_time_total for e in rows] == [500.0, 300.0, 20.0, 10.0]
    assert len(_largest(events(*[11.0] * 50), busy_us=1000.0)) == 40
    assert _largest(events(0.0), busy_us=0.0) == []


def test_peak_memory_reports_the_heap_at_the_most_resident_sample(numbers_model, tmp_path):
    """peak_memory.py runs every variant in a fresh process; ``--heap`` (glibc only) adds the
    heap in use, held free and mapped at the sample of the most resident memory, each a range
    of numbers of MB."""
    import ctypes

    import pytest

    if not hasattr(ctypes.CDLL(None), "mallinfo2"):
        pytest.skip("--heap reads glibc's mallinfo2 (glibc 2.33 or later); this C library lacks it")
    text = tmp_path / "in.txt"
    text.write_text("one\nseventy-one\nfour hundred and twelve\n" * 30, encoding="utf-8")
    out = tmp_path / "peak.md"
    _bench("peak_memory.py", "--model", str(numbers_model), "--input", str(text), "--rounds",
           "1", "--beams", "1", "--heap", "--markdown", str(out))  # fmt: skip
    rows = [line for line in out.read_text().splitlines() if line.startswith("| greedy |")]
    assert [row.split(" | ")[1] for row in rows] == [
        "default", "64 sentences a batch", "one batch", "one batch, unpacked",
        "one batch, unpacked, MKL products",
    ]  # fmt: skip
    for row in rows:
        cells = row.strip("| ").split(" | ")
        assert re.fullmatch(r"-?\d+--?\d+", cells[2]) and re.fullmatch(r"[\d.]+", cells[3])
        heap = cells[4].split(", ")
        assert len(heap) == 3 and all(re.fullmatch(r"-?\d+--?\d+", h) for h in heap), row


@pytest.mark.parametrize("deadline", [580, 300])
def test_the_one_gpu_call_fits_its_parts_in_its_deadline(tmp_path, deadline):
    """benchmarks/gpu_one_call.sh runs on a lent GPU, whose device time counts the machine's
    start too: every part's time limit scales with DEADLINE, and the longest of the parts run
    side by side plus the timed parts run in turn fit in it. The parts are recorded by a stand-in
    for gpu_checks.sh (and for python3, which installs the wheels)."""
    bin_dir, out = tmp_path / "bin", tmp_path / "out"
    bin_dir.mkdir(), out.mkdir()
    log = tmp_path / "parts.txt"
    stub = bin_dir / "checks.sh"
    stub.write_text(f'#!/bin/sh\necho "$2 $PART_LIMIT" >> {log}\n')
    (bin_dir / "python3").write_text("#!/bin/sh\nexit 0\n")
    for script in (stub, bin_dir / "python3"):
        script.chmod(0o755)
    env = dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}", OUT=str(out),
               GPU_CHECKS=str(stub), DEADLINE=str(deadline),
               RESULTS=str(tmp_path / "results"))  # fmt: skip
    done = subprocess.run(["bash", str(BENCHMARKS / "gpu_one_call.sh")], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert "all ended at" in done.stdout, done.stdout + done.stderr
    parts = [(name, int(limit)) for name, limit in map(str.split, log.read_text().splitlines())]
    # five side by side (the warm-up compile is the first profile-compiled), four in turn, then
    # speed-compiled in what the clock leaves
    side_by_side, in_turn = dict(parts[:5]), parts[5:9]
    assert set(side_by_side) == {"tests", "cli", "multi30k", "profile-compiled", "step-cost"}
    assert [name for name, _ in in_turn] == ["speed", "profile-compiled", "decode", "profile"]
    assert parts[9][0] == "speed-compiled" and len(parts) == 10, parts
    used = max(side_by_side.values()) + sum(limit for _, limit in in_turn)
    assert deadline * 0.9 <= used <= deadline, (used, parts)
    # when each part ended comes back with the results, for sizing the next call
    ended = (tmp_path / "results" / "ended.txt").read_text()
    for name in ("tests", "cli", "multi30k", "warm-up compile", "step-cost", "speed", "all"):
        assert re.search(rf"^{name} ended at \d+ s$", ended, re.MULTILINE), ended


def test_one_sentence_times_ours_and_ctranslate2_with_the_same_outputs(numbers_model, tmp_path):
    pytest.importorskip("ctranslate2")
    text, out = tmp_path / "in.txt", tmp_path / "table.md"
    text.write_text("seven\nninety-one\nfour hundred and twelve\n", encoding="utf-8")
    _bench("one_sentence.py", "--model", str(numbers_model), "--input", str(text),
           "--sentences", "3", "--beams", "1", "--rounds", "1", "--repeat", "1",
           "--markdown", str(out))  # fmt: skip
    table = out.read_text()
    assert "3 sentences, each translated alone" in table
    ours = re.search(r"\| greedy \| ours \| ([0-9.]+); ([0-9.]+) \| yes \|", table)
    assert ours and float(ours[1]) > 0, table
    assert "| greedy | CTranslate2 fp32 | " in table, table


def test_small_products_tables_onednn_over_mkl_by_rows(tmp_path):
    from transformer.model.products import can_pack

    if not can_pack():
        pytest.skip("this PyTorch has no oneDNN product on this CPU")
    out = tmp_path / "table.md"
    _bench("small_products.py", "--threads", "1", "--calls", "8", "--markdown", str(out))
    table = out.read_text()
    assert "SMALL_PRODUCT = 1.05 M" in table
    row = re.search(r"\| 128 → 128 \| ([0-9.]+) \(0\.02\) \|", table)  # one row: 16,384
    assert row and float(row[1]) > 0, table
