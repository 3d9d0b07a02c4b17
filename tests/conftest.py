"""Shared fixtures: one small trained model for the command-line tests, and server processes."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from transformer.config import RuntimeConfig
from transformer.inference.engine import load_torch_engine
from transformer.serve.config import API_KEY_ENV
from transformer.training.loop import train

from helpers import TINY_NUMBERS, cli_main, copy_sentences, train_config


@pytest.fixture(scope="session")
def numbers_model(tmp_path_factory) -> Path:
    """A tiny en->fr number-words model trained for a few seconds (it translates badly)."""
    out = tmp_path_factory.mktemp("numbers") / "model"
    args = [
        *TINY_NUMBERS, "--max_steps", "120", "--save_every", "40", "--validate_every", "40",
        "--peak_lr", "3e-3", "--bleu_sentences", "10",
        "--best_metric", "loss",  # BLEU on 10 sentences of a barely trained model is noise
    ]  # fmt: skip
    train(train_config(args), out, progress=False)
    return out


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory) -> Path:
    """A tiny number-words run with checkpoints at steps 10 and 20 (best = last = 20), for
    tests that damage a copy of it (tests/test_faults.py, test_faults_training_files.py)."""
    out = tmp_path_factory.mktemp("tiny_run") / "run"
    args = [*TINY_NUMBERS, "--bleu_sentences", "5", "--log_every", "1", "--max_steps", "20",
            "--save_every", "10", "--validate_every", "10"]  # fmt: skip
    train(train_config(args), out, progress=False)
    return out


@pytest.fixture(scope="session")
def copy_model(tmp_path_factory) -> Path:
    """A tiny model trained to copy its input (800 steps, about 15 s on a quiet 2-core machine):
    a task whose right answer and word alignment (the diagonal) are known. Every word is one
    SentencePiece piece (vocabulary 60). Trained on sentences where words may repeat: trained
    without repeats it copied 162 of 200 test sentences, with them 200. After 500 steps the
    share of diagonal alignments still moved with the seed and the last bits of the loss
    (162 to 196 of 200 over seeds 1-4); after 800 it was 198 to 200 over seeds 1-5."""
    folder = tmp_path_factory.mktemp("copy")
    lines = "".join(line + "\n" for line in copy_sentences(3000, seed=0, repeats=True))
    (folder / "src.txt").write_text(lines)
    (folder / "tgt.txt").write_text(lines)
    args = [
        "--preset", "tiny", "--corpus", "null", "--data.src", str(folder / "src.txt"), "--data.tgt",
        str(folder / "tgt.txt"), "--src_lang", "xx", "--tgt_lang", "yy", "--vocab_size", "60",
        "--max_tokens", "1500", "--warmup_steps", "30", "--peak_lr", "5e-3", "--max_steps", "800",
        "--validate_every", "800", "--save_every", "800", "--bleu_sentences", "0",
        "--best_metric", "loss", "--max_positions", "32", "--dropout", "0.0",
        "--runtime.threads", "1",  # a model this small gains nothing from two
    ]  # fmt: skip
    threads = torch.get_num_threads()
    train(train_config(args), folder / "model", progress=False)
    torch.set_num_threads(threads)
    return folder / "model"


@pytest.fixture(scope="session")
def rnn_numbers_model(tmp_path_factory) -> Path:
    """The same data as ``numbers_model``, learned for a few seconds by a GRU with Bahdanau
    attention (tests/test_rnn.py, tests/test_compare.py)."""
    out = tmp_path_factory.mktemp("numbers_rnn") / "model"
    args = [
        *TINY_NUMBERS, "--architecture", "rnn", "--rnn_attention", "bahdanau",
        "--rnn_hidden", "32", "--rnn_embedding", "32", "--max_steps", "30", "--save_every", "15",
        "--validate_every", "15", "--log_every", "5", "--peak_lr", "3e-3",
        "--bleu_sentences", "10", "--best_metric", "loss", "--threads", "1",
    ]  # fmt: skip
    train(train_config(args), out, progress=False)  # one thread: see test_rnn.one_thread
    return out


@pytest.fixture(scope="module")
def exported(numbers_model, tmp_path_factory) -> Path:
    """The tests' number-words model exported to CTranslate2 (skipped without ctranslate2)."""
    pytest.importorskip("ctranslate2")
    out = tmp_path_factory.mktemp("export") / "E"
    assert cli_main("export", str(numbers_model), "--to", "ctranslate2", str(out)).code == 0
    return out


@pytest.fixture(scope="module")
def torch_engine(numbers_model):
    """The tests' number-words model as our engine, on the CPU."""
    return load_torch_engine(numbers_model, runtime=RuntimeConfig(device="cpu"))


@pytest.fixture
def server_process():
    """Starts ``python -m transformer serve MODEL --port 0 --device cpu ARGS`` and returns the
    process and its URL (read from the line it prints); kills what is still running after."""
    started: list[subprocess.Popen] = []

    def start(model: Path, *args: str) -> tuple[subprocess.Popen, str]:
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        env.pop(API_KEY_ENV, None)
        command = [sys.executable, "-m", "transformer", "serve", str(model), "--port", "0",
                   "--device", "cpu", *args]  # fmt: skip
        proc = subprocess.Popen(command, stderr=subprocess.PIPE, text=True, env=env)
        started.append(proc)
        said: list[str] = []
        while not said or "listening on" not in said[-1]:
            said.append(proc.stderr.readline())
            if not said[-1]:  # it ended
                proc.wait(10)
                raise AssertionError("the server did not start:\n" + "".join(said))
        return proc, said[-1].rsplit(" ", 1)[1].strip()

    yield start
    for proc in started:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


def pytest_addoption(parser):
    parser.addoption("--serve-model", help="model directory for tests/test_serve_page.py "
                     "(default: the tiny model trained for the tests)")  # fmt: skip
    parser.addoption("--screenshot", help="also save the screenshot of tests/test_serve_page.py "
                     "here (e.g. docs/serve.png)")  # fmt: skip


def pytest_collection_modifyitems(config, items):
    """Tests marked ``gpu`` need CUDA: without it they are skipped, with the reason."""
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device (torch.cuda.is_available() is False)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
