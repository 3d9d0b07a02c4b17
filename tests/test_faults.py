"""Fault injection: the real command line under mistakes, damage, full disks and signals.

Each case runs the command line in a temporary folder and checks what a user sees: the exit code;
that stderr is a single line, without a traceback, naming the file or value at fault; and that
every file the user had before is byte-identical afterwards. Commands run in this process
(``cli``: the ``main`` that ``python -m transformer`` calls) unless the case needs a process of its
own: a signal, kill -9, a pipe, or a second training holding the run.
"""

from __future__ import annotations

import builtins
import errno
import json
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from transformer import files

from helpers import TINY_NUMBERS, Result, command_process, one_line_error, snapshot
from helpers import cli_main as cli

pytestmark = pytest.mark.slow  # every test here trains or starts processes

TINY = [*TINY_NUMBERS, "--bleu_sentences", "5", "--log_every", "1"]
STEP_10, STEP_20 = "step_00000010", "step_00000020"


@pytest.fixture
def run(tiny_run, tmp_path) -> Path:
    """A fresh copy of the tiny run (conftest.py), and a user's own file beside it."""
    copy = tmp_path / "run"
    shutil.copytree(tiny_run, copy)
    (copy / "notes.txt").write_text("the user's notes, never to be touched\n")
    return copy


# ------------------------------------------------------------------ outputs that are inputs
def test_translate_output_equal_to_input_is_refused(run, tmp_path):
    text = tmp_path / "in.txt"
    text.write_text("twelve\nfour\n")
    link = tmp_path / "link.txt"
    link.symlink_to(text)
    before = snapshot(tmp_path)
    for output in (text, link):
        result = cli("translate", str(run), "-i", str(text), "-o", str(output))
        one_line_error(result, 2, f"--output {output}", "same file as --input")
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize("flag", ["--src", "--ref"])
def test_evaluate_output_equal_to_an_input_is_refused(run, tmp_path, flag):
    (tmp_path / "s.txt").write_text("twelve\nfour\n")
    (tmp_path / "r.txt").write_text("douze\nquatre\n")
    target = tmp_path / ("s.txt" if flag == "--src" else "r.txt")
    before = snapshot(tmp_path)
    result = cli("evaluate", str(run), "--src", str(tmp_path / "s.txt"),
                 "--ref", str(tmp_path / "r.txt"), "--output", str(target))  # fmt: skip
    one_line_error(result, 2, f"same file as {flag}")
    assert snapshot(tmp_path) == before


def test_a_failed_translation_leaves_the_old_output_file(run, tmp_path):
    output = tmp_path / "out.txt"
    output.write_text("yesterday's translations\n")
    # 2,500 good lines (one chunk of 2,000 is translated and written), then invalid UTF-8.
    stdin = b"one\n" * 2500 + b"tw\xffo\n"
    result = cli("translate", str(run), "--beam_size", "1", "-o", str(output), stdin=stdin)
    one_line_error(result, 2, "line 2501")
    assert output.read_text() == "yesterday's translations\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.txt", "run"]  # no temporary file


# ------------------------------------------------------------------------ --overwrite
@pytest.mark.parametrize(
    ("mistake", "needle"),
    [
        ("invalid_utf8", "line 2 is not valid UTF-8"),
        ("vocab_size_5", "vocab_size=5"),
        ("every_pair_too_long", "every training pair is longer than data.max_len=1"),
        ("bad_value", "must be a finite number"),
    ],
)
def test_overwrite_with_bad_input_keeps_the_old_run(run, tmp_path, mistake, needle):
    before = snapshot(run)
    args = ["train", "--out", str(run), "--overwrite", "--quiet", *TINY, "--max_steps", "2"]
    if mistake == "invalid_utf8":
        (tmp_path / "bad.txt").write_bytes(b"one two\n\xff\n")
        (tmp_path / "good.txt").write_text("un deux\ntrois\n")
        args += ["--corpus", "null", "--src", str(tmp_path / "bad.txt"),
                 "--tgt", str(tmp_path / "good.txt")]  # fmt: skip
    else:
        args += {"vocab_size_5": ["--vocab_size", "5"], "every_pair_too_long": ["--max_len", "1"],
                 "bad_value": ["--peak_lr", "nan"]}[mistake]  # fmt: skip
    one_line_error(cli(*args), 2, needle)
    assert snapshot(run) == before


def test_overwrite_keeps_the_old_run_until_the_new_one_has_a_checkpoint(run):
    before = snapshot(run)
    args = ["train", "--out", str(run), "--overwrite", "--quiet", *TINY, "--max_steps", "100000",
            "--save_every", "100000", "--validate_every", "100000"]  # fmt: skip
    child = subprocess.Popen([sys.executable, "-m", "transformer", *args], stderr=subprocess.PIPE)
    _wait_for_rows(run / ".staging" / "metrics.jsonl", 3)
    child.kill()  # kill -9: no chance to clean up
    child.wait()
    assert snapshot(run).items() >= before.items()  # every old file as it was
    # The next start finds the abandoned new run and removes it; the old run is intact.
    result = cli("translate", str(run), stdin="twelve\n")
    assert result.code == 0, result.stderr
    resumed = cli("train", "--out", str(run), "--resume", "--quiet", "--max_steps", "21")
    assert resumed.code == 0, resumed.stderr
    assert any("removed" in line and ".staging" in line for line in resumed.stderr)
    assert not (run / ".staging").exists()


def test_overwrite_replaces_the_run_once_it_has_a_checkpoint(run):
    old_config = (run / "config.json").read_text()
    args = ["train", "--out", str(run), "--overwrite", "--quiet", *TINY, "--max_steps", "4",
            "--save_every", "2", "--validate_every", "2", "--d_model", "16"]  # fmt: skip
    assert cli(*args).code == 0
    assert (run / "config.json").read_text() != old_config
    assert json.loads((run / "config.json").read_text())["model"]["d_model"] == 16
    assert sorted(p.name for p in (run / "checkpoints").glob("step_*")) == [
        "step_00000002", "step_00000004"
    ]  # fmt: skip
    assert (run / "notes.txt").read_text().startswith("the user's notes")
    assert sorted(p.name for p in run.iterdir() if p.name.startswith(".")) == [".lock"]
    # the same data and tokenizers: the old run's training set is reused, and the new run has
    # it too (the swap dropped it: the new run had none of its own)
    assert (run / "data" / "train" / "meta.json").is_file()


def test_overwrite_with_other_data_replaces_the_run_and_its_training_set(run):
    # A training set made anew goes from the run's scratch folder into the new run built in
    # .staging (a write gate refusal, with a traceback, left .tmp-data behind).
    old_meta = (run / "data" / "train" / "meta.json").read_text()
    args = ["train", "--out", str(run), "--overwrite", "--quiet", *TINY, "--max_steps", "2",
            "--save_every", "2", "--validate_every", "2", "--numbers_train", "300"]  # fmt: skip
    done = cli(*args)
    assert done.code == 0, done.stderr
    assert not [line for line in done.stderr if "Traceback" in line]
    assert (run / "data" / "train" / "meta.json").read_text() != old_meta
    assert json.loads((run / "config.json").read_text())["data"]["numbers_train"] == 300
    assert (run / "notes.txt").read_text().startswith("the user's notes")
    assert sorted(p.name for p in run.iterdir() if p.name.startswith(".")) == [".lock"]
    resumed = cli("train", "--out", str(run), "--resume", "--quiet", "--max_steps", "3")
    assert resumed.code == 0, resumed.stderr


# ----------------------------------------------------------------- index and checkpoints
@pytest.mark.parametrize("damage", ["missing", "garbage"])
def test_a_bad_index_falls_back_to_the_newest_checkpoint(run, damage):
    index = run / "checkpoints" / "index.json"
    index.unlink() if damage == "missing" else index.write_text("{garbage")
    expected = cli("translate", str(run / "checkpoints" / STEP_20), stdin="twelve\n").stdout
    result = cli("translate", str(run), stdin="twelve\n")
    assert result.code == 0 and result.stdout == expected
    warning = one_line_error(Result(0, "", result.stderr), 0, "index.json", STEP_20)
    assert "warning" in warning
    resumed = cli("train", "--out", str(run), "--resume", "--quiet", "--max_steps", "22")
    assert resumed.code == 0, resumed.stderr
    assert "index.json" in resumed.stderr[0] and STEP_20 in resumed.stderr[0]
    assert json.loads(index.read_text())["last"] == "step_00000022"


def test_a_run_without_a_checkpoint_says_how_to_go_on(run):
    shutil.rmtree(run / "checkpoints")
    args = ["train", "--out", str(run), "--quiet", *TINY, "--max_steps", "3"]
    one_line_error(cli(*args), 2, "stopped before its first checkpoint", "--resume", "--overwrite")
    result = cli("train", "--out", str(run), "--resume", "--quiet", "--max_steps", "3")
    assert result.code == 0, result.stderr
    assert "starting again from step 0" in result.stderr[0]
    assert (run / "checkpoints" / "step_00000003").is_dir()


@pytest.mark.parametrize("damage", ["empty", "truncated"])
@pytest.mark.parametrize("command", ["translate", "evaluate", "average"])
def test_damaged_weights_name_the_file(run, damage, command):
    weights = run / "checkpoints" / STEP_20 / "model.safetensors"
    data = weights.read_bytes()
    weights.write_bytes(b"" if damage == "empty" else data[: len(data) // 2])
    before = snapshot(run)
    args = {"translate": ["translate", str(run)], "evaluate": ["evaluate", str(run)],
            "average": ["average", str(run), "--last", "2"]}[command]  # fmt: skip
    one_line_error(cli(*args, stdin="twelve\n"), 2, str(weights), "is damaged")
    assert snapshot(run) == before


@pytest.mark.parametrize("file", ["model.safetensors", "trainer.pt"])
def test_resume_falls_back_to_the_newest_intact_checkpoint(run, file):
    damaged = run / "checkpoints" / STEP_20 / file
    damaged.write_bytes(damaged.read_bytes()[:100])
    result = cli("train", "--out", str(run), "--resume", "--quiet", "--max_steps", "12")
    assert result.code == 0, result.stderr
    assert str(damaged) in result.stderr[0] and "is damaged" in result.stderr[0]
    assert STEP_10 in result.stderr[1]
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    resumed = [row for row in rows if row.get("event") == "resume"]
    assert len(resumed) == 1 and resumed[0]["step"] == 10 and resumed[0]["checkpoint"] == STEP_10


# ------------------------------------------------------------------------- full disk
def test_a_full_disk_while_saving_names_the_folder_and_keeps_the_last_checkpoint(
    tmp_path, monkeypatch
):
    def full_disk(path, mode="r", *args, **kwargs):  # the second save's files
        if "x" in mode and ".step_00000020.transformer-tmp-" in str(path):
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        return builtins.open(path, mode, *args, **kwargs)

    monkeypatch.setattr(files, "open", full_disk, raising=False)  # the write gate's
    out = tmp_path / "run"
    args = ["train", "--out", str(out), "--quiet", *TINY, "--max_steps", "30",
            "--save_every", "10", "--validate_every", "10"]  # fmt: skip
    line = one_line_error(cli(*args), 2, "no space left on device")
    assert f"saving checkpoint {STEP_20} in {out / 'checkpoints'}" in line
    assert f"{out / 'checkpoints' / STEP_10} is intact" in line
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["index.json", STEP_10]
    monkeypatch.undo()
    assert cli("translate", str(out), stdin="twelve\n").code == 0


def test_a_really_full_disk(tmp_path):
    """The same on a 2 MB tmpfs, where the test may mount one (root on Linux)."""
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(disk)],
                             capture_output=True)  # fmt: skip
    if mounted.returncode:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        out = disk / "run"
        args = ["train", "--out", str(out), "--quiet", *TINY, "--max_steps", "1000",
                "--save_every", "1", "--validate_every", "1000",
                "--keep_checkpoints", "100"]  # fmt: skip
        one_line_error(cli(*args), 2, "no space left on device")
        assert not [p for p in (out / "checkpoints").iterdir() if p.name.startswith(".")]
        assert cli("translate", str(out), stdin="twelve\n").code == 0  # the last one loads
    finally:
        subprocess.run(["umount", str(disk)], check=True)


# ---------------------------------------------------------------------- bad values
def test_evaluate_with_empty_files(run, tmp_path):
    (tmp_path / "s.txt").write_text("")
    (tmp_path / "r.txt").write_text("")
    result = cli("evaluate", str(run), "--src", str(tmp_path / "s.txt"),
                 "--ref", str(tmp_path / "r.txt"))  # fmt: skip
    one_line_error(result, 2, "nothing to evaluate", "s.txt")
    # lines that are all blank on one side: BLEU 0 with exit 0, against nothing
    for blank, other in (("s.txt", "r.txt"), ("r.txt", "s.txt")):
        (tmp_path / blank).write_text("\n \n")
        (tmp_path / other).write_text("twelve\nfour\n")
        result = cli("evaluate", str(run), "--src", str(tmp_path / "s.txt"),
                     "--ref", str(tmp_path / "r.txt"))  # fmt: skip
        one_line_error(result, 2, "nothing to evaluate", f"every line of {tmp_path / blank}")


@pytest.mark.parametrize(
    ("option", "value", "field"),
    [
        ("--temperature", "inf", "temperature"),
        ("--temperature", "nan", "temperature"),
        ("--max-len-a", "inf", "max_len_a"),
        ("--max-len-a", "nan", "max_len_a"),
        ("--length-penalty", "nan", "length_penalty"),
        ("--length-penalty", "-1", "length_penalty"),
    ],
)
def test_non_finite_or_negative_options_are_refused(run, option, value, field):
    result = cli("translate", str(run), option, value, "--sampling", stdin="twelve\n")
    one_line_error(result, 2, field, value)


@pytest.mark.parametrize("option", ["--max_minutes", "--peak_lr", "--dropout", "--clip_norm"])
def test_non_finite_training_options_are_refused(tmp_path, option):
    result = cli("train", "--out", str(tmp_path / "run"), *TINY, option, "nan")
    one_line_error(result, 2, option.strip("-"), "nan")
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(("option", "value", "field"), [
    ("--seed", str(2**63), "seed"),  # a traceback from torch's generator, the run begun
    ("--split_seed", str(2**64), "split_seed"),
    ("--seed", "-1", "seed"),
    ("--vocab_size", str(2**63), "vocab_size"),  # a traceback from SentencePiece
    ("--vocab_size", "1048577", "vocab_size"),  # more than a model's vocabulary may hold
    ("--bleu_sentences", "-1", "bleu_sentences"),  # it decoded all but the last sentence
])  # fmt: skip
def test_a_seed_or_size_beyond_its_range_is_refused_before_training(tmp_path, option, value,
                                                                     field):  # fmt: skip
    result = cli("train", "--out", str(tmp_path / "run"), *TINY, "--max_steps", "1", option, value)
    one_line_error(result, 2, field, value)
    assert not (tmp_path / "run").exists()


# -------------------------------------------------------------------------- signals
def _wait_for_rows(path: Path, rows: int, timeout: float = 120) -> None:
    end = time.time() + timeout
    while time.time() < end:
        if path.exists() and len(path.read_text().splitlines()) >= rows:
            return
        time.sleep(0.1)
    raise AssertionError(f"{path} never had {rows} rows")


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_saves_a_checkpoint_and_says_how_to_resume(tmp_path, signum, code):
    out = tmp_path / "run"
    args = ["train", "--out", str(out), "--quiet", *TINY, "--max_steps", "100000",
            "--save_every", "100000", "--validate_every", "100000"]  # fmt: skip
    child = subprocess.Popen([sys.executable, "-m", "transformer", *args],
                             stderr=subprocess.PIPE, text=True)  # fmt: skip
    _wait_for_rows(out / "metrics.jsonl", 4)
    child.send_signal(signum)
    stderr = child.communicate(timeout=120)[1].splitlines()
    line = one_line_error(Result(child.returncode, "", stderr), code, "continue with:")
    assert line.endswith(f"transformer train --out {out} --resume")
    step = int(line.split(" at step ")[1].split(":")[0])
    index = json.loads((out / "checkpoints" / "index.json").read_text())
    assert index["last"] == f"step_{step:08d}"
    result = cli("train", "--out", str(out), "--resume", "--quiet", "--max_steps", str(step + 2))
    assert result.code == 0, result.stderr


def test_ctrl_c_while_the_command_imports_is_one_line_and_130():
    # The command's first second is its imports (torch's); Ctrl-C there showed a traceback.
    done = command_process(
        ["info", "--preset", "small"],
        before=(
            "import builtins, os, signal\n"
            # as a terminal starts a command: Ctrl-C handled, whatever this process inherited
            "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
            "signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})\n"
            "real = builtins.__import__\n"
            "def importing(name, *args, **kwargs):\n"
            "    if name == 'jsonargparse':  # Ctrl-C comes while the command line is imported\n"
            "        os.kill(os.getpid(), signal.SIGINT)\n"
            "    return real(name, *args, **kwargs)\n"
            "builtins.__import__ = importing"
        ),
    )
    assert (done.code, done.stderr, done.stdout) == (130, ["transformer: interrupted"], "")


def test_kill_9_at_random_points_always_leaves_a_loadable_run(tmp_path):
    out = tmp_path / "run"
    args = ["train", "--out", str(out), "--quiet", *TINY, "--max_steps", "100000",
            "--save_every", "1", "--validate_every", "100000",
            "--keep_checkpoints", "2"]  # fmt: skip
    rng = random.Random(8)
    for attempt in range(3):
        command = [sys.executable, "-m", "transformer", *args, *(["--resume"] if attempt else [])]
        child = subprocess.Popen(command, stderr=subprocess.DEVNULL)
        _wait_for_rows(out / "metrics.jsonl", 2 + 10 * attempt)
        time.sleep(rng.uniform(0.0, 1.0))
        child.kill()
        child.wait()
        result = cli("translate", str(out), stdin="twelve\n")
        assert result.code == 0 and result.stdout.count("\n") == 1, result.stderr
    last = json.loads((out / "checkpoints" / "index.json").read_text())["last"]
    result = cli("train", "--out", str(out), "--resume", "--quiet",
                 "--max_steps", str(int(last[5:]) + 1))  # fmt: skip
    assert result.code == 0, result.stderr
    assert not [p for p in (out / "checkpoints").iterdir() if p.name.startswith(".")]


def test_a_broken_pipe_exits_quietly(run):
    shell = (f"set -o pipefail; {sys.executable} -m transformer translate {run} --beam_size 1 "
             "| head -1")  # fmt: skip
    done = subprocess.run(["bash", "-c", shell], input="twelve\n" * 3000, capture_output=True,
                          text=True, timeout=300)  # fmt: skip
    assert done.returncode == 141 and done.stderr == "" and done.stdout.count("\n") == 1


# ---------------------------------------------------------------------- smaller points
def test_dropped_pairs_and_a_capped_vocabulary_are_reported(tmp_path):
    args = ["train", "--out", str(tmp_path / "run"), "--quiet", *TINY, "--max_steps", "1",
            "--vocab_size", "5000", "--max_len", "6"]  # fmt: skip
    result = cli(*args)
    assert result.code == 0, result.stderr
    dropped = [line for line in result.stderr if "longer than data.max_len=6" in line]
    assert len(dropped) == 2 and "train pairs" in dropped[0] and " of 400 " in dropped[0]
    assert any("data.vocab_size is 5,000 but" in line for line in result.stderr)


def test_a_second_training_into_the_same_folder_is_refused(run):
    args = ["train", "--out", str(run), "--resume", "--quiet", "--max_steps", "100000",
            "--save_every", "100000", "--validate_every", "100000"]  # fmt: skip
    child = subprocess.Popen([sys.executable, "-m", "transformer", *args],
                             stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        _wait_for_rows(run / "metrics.jsonl", 30)  # the first is training
        before = snapshot(run / "checkpoints")
        result = cli("train", "--out", str(run), "--resume", "--quiet")
        one_line_error(result, 2, f"{run} is in use by another training (process {child.pid})")
        assert snapshot(run / "checkpoints") == before
    finally:
        child.kill()
        child.wait()


def test_src_without_tgt_names_the_flag(tmp_path):
    (tmp_path / "a.txt").write_text("one\ntwo\n")
    result = cli("train", "--src", str(tmp_path / "a.txt"), "--out", str(tmp_path / "x"))
    one_line_error(result, 2, "a.txt: line 1 has no tab", "--tgt")


def test_valid_src_without_valid_tgt_names_that_flag(tmp_path):
    (tmp_path / "a.tsv").write_text("one\tun\ntwo\tdeux\n" * 50)
    (tmp_path / "v.txt").write_text("one\ntwo\n")
    result = cli("train", "--src", str(tmp_path / "a.tsv"), "--valid_src", str(tmp_path / "v.txt"),
                 "--out", str(tmp_path / "x"))  # fmt: skip
    line = one_line_error(result, 2, "v.txt: line 1 has no tab", "--valid_tgt FILE",
                          "data.valid_tgt in a YAML config")  # fmt: skip
    assert "--tgt" not in line
    assert not (tmp_path / "x").exists()


def test_an_unknown_config_lists_the_built_in_ones(tmp_path):
    result = cli("train", "--config", "nosuch", "--out", str(tmp_path / "x"))
    one_line_error(result, 2, "nosuch", "multi30k-de-en, numbers")


def test_the_demo_refuses_to_replace_another_kind_of_run(run):
    (run / "transformer-run.json").write_text('{"kind": "run"}')  # not saying who made it
    values = json.loads((run / "config.json").read_text())
    values["data"]["corpus"] = "multi30k"
    (run / "config.json").write_text(json.dumps(values))
    before = snapshot(run)
    one_line_error(cli("demo", "--out", str(run)), 2, "not a demo run", "choose another --out")
    assert snapshot(run) == before


def test_the_demo_never_replaces_a_run_that_train_made(run):
    """``train --corpus numbers`` writes to the demo's folder (runs/numbers-en-fr) by default:
    a training of the user's there, on the demo's corpus, was replaced by the next demo."""
    from transformer.demo import _check_replaceable
    from transformer.model_dir.runs import RunDir

    assert json.loads((run / "transformer-run.json").read_text())["made_by"] == "train"
    before = snapshot(run)
    one_line_error(cli("demo", "--out", str(run)), 2, "`transformer train` made",
                   "not a demo run", "choose another --out")  # fmt: skip
    assert snapshot(run) == before
    (run / "transformer-run.json").write_text('{"kind": "run", "made_by": "' + "x" * 999 + '"}')
    line = one_line_error(cli("demo", "--out", str(run)), 2, "the demo did not make")
    assert "xxx" not in line  # the marker's words are not repeated
    (run / "transformer-run.json").write_text('{"kind": "run", "made_by": "demo"}')
    _check_replaceable(RunDir(run), "numbers")  # the demo's own: replaced
    (run / "transformer-run.json").write_text('{"kind": "run"}')  # made before markers said
    _check_replaceable(RunDir(run), "numbers")  # on its corpus: replaced, as before
