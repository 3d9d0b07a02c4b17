"""Distributed training (torchrun, gloo on the CPU) against one process, the sharding of the
batch stream, what a crashed or hung rank does to the job, and the binarized dataset on disk."""

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from transformer.config import ModelConfig
from transformer.data.batching import Example, make_batches
from transformer.data.binarized import TokenDataset
from transformer.errors import UserError
from transformer.model.build import build_model
from transformer.training.distributed import World, shard
from transformer.training.loop import train
from transformer.training.stream import Position, index_stream

from helpers import train_config

pytestmark = pytest.mark.slow  # every test here trains or starts processes

TINY = [
    "--preset", "tiny", "--corpus", "numbers", "--numbers_max", "999", "--numbers_train", "300",
    "--numbers_valid", "20", "--numbers_test", "20", "--vocab_size", "60", "--joint_vocab", "false",
    "--max_tokens", "400", "--warmup_steps", "20", "--bleu_sentences", "0", "--log_every", "2",
    "--dropout", "0", "--threads", "1",
]  # fmt: skip


def torchrun(out: Path, *args: str, nproc: int = 2) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
           f"--nproc_per_node={nproc}", "-m", "transformer", "train", "--out", str(out),
           "--quiet", *TINY, *args]  # fmt: skip
    # faulthandler: a rank that dies of a signal prints every thread's Python stack
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONFAULTHANDLER": "1"}
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def finished(proc: subprocess.Popen, timeout: float = 240) -> tuple[int, str, str]:
    out, err = proc.communicate(timeout=timeout)
    return proc.returncode, out, err


def weights(run: Path, step: int) -> dict[str, torch.Tensor]:
    return load_file(str(run / "checkpoints" / f"step_{step:08d}" / "model.safetensors"))


def test_two_processes_end_with_the_weights_of_one_that_accumulates_two(tmp_path):
    """2 gloo ranks × 1 batch per step, stopped at step 4 and resumed to step 8, against one
    process × 2 batches per step: the same gradients, so the same weights."""
    steps = ["--save_every", "4", "--validate_every", "4"]
    rc, _, err = finished(torchrun(tmp_path / "two", *steps, "--max_steps", "4"))
    assert rc == 0, err[-3000:]
    rc, out, err = finished(torchrun(tmp_path / "two", *steps, "--max_steps", "8", "--resume"))
    assert rc == 0, err[-3000:]
    assert out.count("trained 4 more steps (from step 4 to 8)") == 1, out  # rank 0 speaks
    train(train_config([*TINY, *steps, "--max_steps", "8", "--accumulate", "2"]),
          tmp_path / "one", progress=False)  # fmt: skip
    two, one = weights(tmp_path / "two", 8), weights(tmp_path / "one", 8)
    assert two.keys() == one.keys()
    differences = {k: (two[k] - one[k]).abs().max().item() for k in one}
    assert max(differences.values()) <= 1e-5, differences
    moved = weights(tmp_path / "one", 4)  # the weights did change between the checkpoints
    assert max((moved[k] - one[k]).abs().max().item() for k in one) > 1e-3
    events = [json.loads(line) for line in (tmp_path / "two" / "metrics.jsonl").open()]
    assert events[0]["world_size"] == 2
    assert [e["event"] for e in events if "event" in e] == ["start", "end", "resume", "end"]


def test_resuming_with_another_world_size_says_what_changes(tmp_path, caplog):
    rc, _, err = finished(torchrun(tmp_path / "run", "--max_steps", "2", "--save_every", "2"))
    assert rc == 0, err[-3000:]
    cfg = train_config([*TINY, "--max_steps", "3"])
    with caplog.at_level("WARNING"):
        train(cfg, tmp_path / "run", resume=True, progress=False)
    messages = [r.message for r in caplog.records]
    assert any("saved with 2 process" in m and "with 1:" in m for m in messages), messages


@pytest.mark.parametrize("size", [1, 2, 3, 4])
@pytest.mark.parametrize("accumulate", [1, 3])
def test_rank_shards_cover_every_batch_exactly_once_per_epoch(size, accumulate):
    rng = np.random.default_rng(size)
    examples = [
        Example([1] * int(a), [1] * int(b)) for a, b in rng.integers(1, 30, size=(500, 2))
    ]  # fmt: skip
    epoch = [tuple(b.tolist()) for b in make_batches(examples, 200, seed=7, epoch=0)]
    streams = [index_stream(examples, 200, 7, Position()) for _ in range(size)]
    trained: list[tuple[int, ...]] = []  # the first epoch's batches, as the ranks trained them
    per_rank = [0] * size
    for _ in range(-(-len(epoch) // (size * accumulate))):  # the steps that finish the epoch
        groups, shards = [], []
        for rank, stream in enumerate(streams):  # every rank reads the same global stream ...
            group = [next(stream) for _ in range(size * accumulate)]
            groups.append([(p.epoch, p.batch, tuple(b.tolist())) for p, b in group])
            shards.append(shard(groups[-1], World(rank, size)))  # ... and trains on its share
            per_rank[rank] += len(shards[-1])
        assert all(g == groups[0] for g in groups)
        union = [batch for mine in shards for batch in mine]
        assert sorted(union) == sorted(groups[0])  # the shares partition the step's batches
        trained += [batch for *_, batch in union if _in_first_epoch(groups[0], batch)]
    assert sorted(trained) == sorted(epoch)  # every batch of the epoch once, none twice
    assert len(set(trained)) == len(trained)
    assert len(set(per_rank)) == 1  # equal shares


def _in_first_epoch(group, batch) -> bool:
    """Whether ``batch`` is read in epoch 0 (its position after is (0, i) or (1, 0))."""
    epoch, index, _ = next(entry for entry in group if entry[2] == batch)
    return epoch == 0 or index == 0


def _pid_of_rank(parent: int, rank: int) -> int | None:
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            env = (entry / "environ").read_bytes().split(b"\0")
            status = (entry / "status").read_text()
        except OSError:
            continue
        ppid = next((int(line.split()[1]) for line in status.splitlines()
                     if line.startswith("PPid:")), None)  # fmt: skip
        if ppid == parent and f"RANK={rank}".encode() in env:
            return int(entry.name)
    return None


def _ended(pid: int, timeout: float) -> bool:
    """Whether process ``pid`` ends (or is a zombie waiting for its parent) within ``timeout`` s."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            return True
        if state in ("Z", "X"):
            return True
        time.sleep(0.1)
    return False


def _wait_for_training(run: Path, proc: subprocess.Popen) -> int:
    deadline = time.time() + 120
    while time.time() < deadline and proc.poll() is None:
        metrics = run / "metrics.jsonl"
        if metrics.exists() and metrics.read_text().count('"step"') >= 3:
            pid = _pid_of_rank(proc.pid, 1)
            if pid is not None:
                return pid
        time.sleep(0.2)
    proc.kill()
    raise AssertionError(f"training did not start: {proc.communicate()[1][-3000:]}")


@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="needs Linux's /proc")
def test_a_killed_rank_ends_the_job_with_a_message_naming_it(tmp_path):
    proc = torchrun(tmp_path / "run", "--max_steps", "100000")
    os.kill(_wait_for_training(tmp_path / "run", proc), signal.SIGKILL)
    started = time.time()
    rc, _, err = finished(proc, timeout=120)
    assert rc != 0
    assert time.time() - started < 60
    assert "rank      : 1" in err and "SIGKILL" in err, err[-3000:]


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="needs Linux's /proc")
def test_a_hung_rank_times_out_with_one_line_naming_the_rank_that_waited(tmp_path):
    proc = torchrun(tmp_path / "run", "--max_steps", "100000", "--timeout_minutes", "0.1")
    hung = _wait_for_training(tmp_path / "run", proc)
    waiting = _pid_of_rank(proc.pid, 0)
    os.kill(hung, signal.SIGSTOP)
    try:
        # Rank 0 gives up after 6 s. torchrun then sends the others SIGTERM and gives them 30 s
        # before SIGKILL, which a stopped rank cannot act on: kill it once rank 0 has ended.
        assert waiting is not None and _ended(waiting, timeout=120), "rank 0 did not give up"
        os.kill(hung, signal.SIGKILL)
        rc, _, err = finished(proc, timeout=180)
    finally:  # nothing left running when an assertion fails
        for pid in (hung, waiting or hung):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    assert rc != 0
    lines = [line for line in err.splitlines() if "transformer train [rank 0 of 2]: error:" in line]
    assert len(lines) == 1 and "lost contact" in lines[0], err[-3000:]
    assert "[rank0]: Traceback" not in err  # rank 0 wrote one line, not a traceback
    # (torchrun's own summary that follows is a traceback ending in its table of ranks)


@pytest.fixture(scope="module")
def one_step_run(tmp_path_factory) -> Path:
    """A run of one step: it binarized its training set into run/data/train."""
    run = tmp_path_factory.mktemp("binarized") / "run"
    train(train_config([*TINY, "--max_steps", "1"]), run, progress=False)
    return run


def _written(run: Path, tmp_path: Path) -> tuple[Path, list[Example]]:
    """A copy of the run's binarized training set, and the examples it holds."""
    folder = tmp_path / "train"
    shutil.copytree(run / "data" / "train", folder)
    return folder, list(TokenDataset.open(folder))


def test_binarized_dataset_reads_back_the_ids_that_were_written(one_step_run, tmp_path):
    from transformer.data.corpora import load_splits
    from transformer.data.tokenizer import Tokenizers
    from transformer.model_dir.checkpoints import read_config
    from transformer.training.prepare import encode_pairs

    folder, examples = _written(one_step_run, tmp_path)
    cfg = train_config(TINY)
    pairs = load_splits(cfg.data).train
    tokenizers = Tokenizers.load(one_step_run, read_config(one_step_run).model.vocab_sizes)
    expected, _ = encode_pairs(pairs, tokenizers, max_len=10**6)
    assert len(examples) == len(expected) == 300
    assert examples == expected
    meta = json.loads((folder / "meta.json").read_text())
    assert meta["examples"] == 300 and meta["dtype"] == "uint16" and meta["too_long"] == 0
    src_bytes = (folder / "src.bin").stat().st_size
    assert src_bytes == 2 * sum(len(e.src) for e in expected)


@pytest.mark.parametrize(
    ("damage", "named"),
    [
        (lambda f: _truncate(f / "tgt.bin", 3), "tgt.bin"),
        (lambda f: _truncate(f / "src.idx", 8), "src.idx"),
        (lambda f: (f / "src.idx").write_bytes(np.arange(301, 0, -1, dtype=np.int64).tobytes()),
         "src.idx"),
        (lambda f: (f / "meta.json").write_text("{not json"), "meta.json"),
        (lambda f: (f / "src.bin").unlink(), "src.bin"),
    ],
)  # fmt: skip
def test_a_damaged_binary_file_is_an_error_that_names_it(one_step_run, tmp_path, damage, named):
    folder, _ = _written(one_step_run, tmp_path)
    damage(folder)
    with pytest.raises(UserError, match=named):
        TokenDataset.open(folder)


def _truncate(path: Path, n: int) -> None:
    data = path.read_bytes()
    path.write_bytes(data[:-n])


def test_a_training_with_its_own_thread_count_leaves_the_callers(tmp_path):
    before = torch.get_num_threads()
    threads = 1 if before != 1 else 2
    cfg = train_config([*TINY, "--max_steps", "1", "--threads", str(threads)])
    train(cfg, tmp_path / "run", progress=False)
    assert torch.get_num_threads() == before  # other runs in this process keep their results


@pytest.mark.parametrize("architecture", ["transformer", "rnn"])
def test_the_models_buffers_are_the_same_on_every_rank_without_a_broadcast(architecture):
    """DDP runs with ``broadcast_buffers=False`` (training/loop.py): that is right only while
    every buffer a model has is a constant each rank builds alike, the sinusoidal position
    tables. A buffer that training changes (a running statistic) would make this fail."""
    config = ModelConfig(architecture=architecture, src_vocab_size=50, tgt_vocab_size=60)
    torch.manual_seed(0)
    first = dict(build_model(config).named_buffers())
    torch.manual_seed(1)
    second = dict(build_model(config).named_buffers())
    assert all(name.endswith("positions.table") for name in first), list(first)
    assert first.keys() == second.keys()
    assert all(torch.equal(first[name], second[name]) for name in first)
