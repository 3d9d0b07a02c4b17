"""Training end to end on tiny configs: learning, exact resume after SIGKILL, determinism,
divergence handling, and the data errors a user can make."""

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from transformer.cli import main
from transformer.config import DecodeConfig
from transformer.data.tokenizer import Tokenizer, Tokenizers
from transformer.errors import UserError
from transformer.inference.translation import translate
from transformer.model_dir.checkpoints import load_checkpoint, read_index
from transformer.model_dir.runs import read_metrics
from transformer.training import loop as train_module
from transformer.training.loop import train

from helpers import train_config, weights

pytestmark = pytest.mark.slow  # every test here trains or starts processes

TINY_NUMBERS = [
    "--preset", "tiny", "--corpus", "numbers", "--numbers_max", "999", "--numbers_train", "300",
    "--numbers_valid", "20", "--numbers_test", "20", "--vocab_size", "60", "--joint_vocab", "false",
    "--max_tokens", "512", "--warmup_steps", "20", "--bleu_sentences", "0", "--log_every", "5",
]  # fmt: skip


def config(*extra: str):
    return train_config([*TINY_NUMBERS, *extra])


def reverse_files(folder: Path, n: int, seed: int) -> tuple[Path, Path]:
    rng = random.Random(seed)
    src, tgt = [], []
    for _ in range(n):
        words = [rng.choice("abcdefgh") for _ in range(rng.randint(3, 7))]
        src.append(" ".join(words))
        tgt.append(" ".join(reversed(words)))
    (folder / "src.txt").write_text("\n".join(src) + "\n")
    (folder / "tgt.txt").write_text("\n".join(tgt) + "\n")
    return folder / "src.txt", folder / "tgt.txt"


@pytest.mark.slow
def test_a_tiny_model_learns_to_reverse_sequences(tmp_path):
    src, tgt = reverse_files(tmp_path, 3000, seed=0)
    cfg = train_config([
        "--preset", "tiny", "--corpus", "null", "--src", str(src), "--tgt", str(tgt),
        "--d_model", "64", "--d_ff", "256", "--dropout", "0.0", "--vocab_size", "20",
        "--max_tokens", "1500", "--max_steps", "500", "--warmup_steps", "50", "--peak_lr", "3e-3",
        "--validate_every", "500", "--bleu_sentences", "0", "--label_smoothing", "0",
        "--cooldown", "0.3",  # the last checkpoint settles (50/50 with it, 40-47 without)
    ])  # fmt: skip
    train(cfg, tmp_path / "run", progress=False)
    loaded = load_checkpoint(tmp_path / "run")
    tokenizers = Tokenizers.load(tmp_path / "run", loaded.config.model.vocab_sizes)
    rng = random.Random(99)
    tests = [" ".join(rng.choice("abcdefgh") for _ in range(rng.randint(3, 7))) for _ in range(50)]
    result = translate(loaded.model, tokenizers, tests, DecodeConfig(beam_size=1))
    correct = sum(
        h == " ".join(reversed(s.split())) for s, h in zip(tests, result.best, strict=True)
    )
    assert correct >= 45, list(zip(tests, result.best, strict=True))[:5]
    losses = [row["loss"] for row in read_metrics(tmp_path / "run") if "loss" in row]
    assert losses[-1] < losses[0] / 4


def test_same_seed_same_weights(tmp_path):
    cfg = config("--max_steps", "8", "--save_every", "8", "--validate_every", "8")
    train(cfg, tmp_path / "a", progress=False)
    train(cfg, tmp_path / "b", progress=False)
    a, b = (
        weights(tmp_path / "a/checkpoints/step_00000008"),
        weights(tmp_path / "b/checkpoints/step_00000008"),
    )
    assert all(torch.equal(a[k], b[k]) for k in a)
    other = train_config([*TINY_NUMBERS, "--max_steps", "8", "--seed", "2"])
    train(other, tmp_path / "c", progress=False)
    c = weights(tmp_path / "c/checkpoints/step_00000008")
    assert not all(torch.equal(a[k], c[k]) for k in a)


@pytest.mark.slow
def test_resume_after_sigkill_is_bit_identical(tmp_path):
    # Killed near step 50 of 120; a validation at step 100 comes after the resume.
    args = [*TINY_NUMBERS, "--d_model", "64", "--d_ff", "128", "--max_steps", "120",
            "--save_every", "10", "--validate_every", "100", "--keep_checkpoints", "50",
    ]  # fmt: skip
    # The uninterrupted run.
    train(train_config(args), tmp_path / "whole", progress=False)
    # The same run in another process, killed with SIGKILL once it has saved step 50 ...
    cmd = [
        sys.executable,
        "-m",
        "transformer",
        "train",
        "--out",
        str(tmp_path / "killed"),
        "--quiet",
        *args,
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    checkpoints = tmp_path / "killed" / "checkpoints"
    deadline = time.time() + 600  # a loaded machine may take minutes to reach step 50
    while time.time() < deadline and proc.poll() is None:
        last = (
            read_index(checkpoints).get("last", "") if (checkpoints / "index.json").exists() else ""
        )
        if last >= "step_00000050":
            break
        time.sleep(0.01)
    if proc.poll() is None:  # at step 50, or wherever the deadline found it
        proc.send_signal(signal.SIGKILL)
    assert proc.wait() == -signal.SIGKILL, proc.stderr.read().decode()
    killed_at = read_index(checkpoints)["last"]
    assert killed_at < "step_00000120"
    # ... then resumed to the end.
    assert main(["train", "--out", str(tmp_path / "killed"), "--resume", "--quiet"]) == 0
    whole = weights(tmp_path / "whole/checkpoints/step_00000120")
    resumed = weights(checkpoints / "step_00000120")
    assert whole.keys() == resumed.keys()
    different = [k for k in whole if not torch.equal(whole[k], resumed[k])]
    assert not different, f"resumed from {killed_at}; differs in {different}"
    events = [row.get("event") for row in read_metrics(tmp_path / "killed")]
    assert "resume" in events


def test_nan_loss_stops_and_keeps_the_last_good_checkpoint(tmp_path, monkeypatch):
    real = train_module.TrainingLoss.forward
    calls = {"n": 0}

    def poisoned(self, src_ids, tgt_in, tgt_out):
        calls["n"] += 1
        sums = real(self, src_ids, tgt_in, tgt_out)
        if calls["n"] == 7:  # the 7th batch = step 7 (no accumulation)
            sums.loss = sums.loss * float("nan")
        return sums

    monkeypatch.setattr(train_module.TrainingLoss, "forward", poisoned)
    cfg = config("--max_steps", "20", "--save_every", "3", "--validate_every", "100")
    with pytest.raises(
        UserError,
        match=r"loss is nan at step 7: training stopped; the last good checkpoint is .*step_0+6",
    ):
        train(cfg, tmp_path / "run", progress=False)
    assert read_index(tmp_path / "run/checkpoints")["last"] == "step_00000006"
    assert torch.isfinite(load_checkpoint(tmp_path / "run", "last").model.output.weight).all()


@pytest.mark.parametrize(
    ("lr_factor", "message"),
    [
        ("1e45", "a weight is nan at step 1"),  # the update overflows float32
        ("1e30", "the validation loss is nan at step 1"),  # finite weights, too large to use
    ],
)
def test_an_update_that_ruins_the_weights_stops_training_before_they_are_saved(
    tmp_path, lr_factor, message
):
    """The first loss and gradient norm are finite, the update that follows is not usable:
    training stops at the validation and save point, and no checkpoint holds the weights."""
    cfg = config("--max_steps", "1", "--save_every", "1", "--validate_every", "1",
                 "--lr_factor", lr_factor)  # fmt: skip
    with pytest.raises(UserError, match=f"{message}: training stopped; no checkpoint was saved"):
        train(cfg, tmp_path / "run", progress=False)
    assert not read_index(tmp_path / "run/checkpoints").get("last")


def test_an_existing_run_is_not_overwritten_without_asking(tmp_path):
    cfg = config("--max_steps", "2")
    train(cfg, tmp_path / "run", progress=False)
    with pytest.raises(UserError, match="already holds a training run; use --resume"):
        train(cfg, tmp_path / "run", progress=False)
    with pytest.raises(UserError, match=r"--resume: model.d_model was 32 in the saved run, now 64"):
        train(
            config("--max_steps", "4", "--d_model", "64"),
            tmp_path / "run",
            resume=True,
            progress=False,
        )


def test_log_counts_empty_and_long_pairs(tmp_path):
    rng = random.Random(0)
    words = [" ".join(rng.choice("abcd") for _ in range(6)) for _ in range(60)]
    src = [*words, "", "x", "a " * 80]
    tgt = [*(w[::-1] for w in words), "y", "", "b " * 80]
    (tmp_path / "s.txt").write_text("\n".join(src) + "\n")
    (tmp_path / "t.txt").write_text("\n".join(tgt) + "\n")
    cfg = train_config([
        "--preset", "tiny", "--corpus", "null", "--src", str(tmp_path / "s.txt"), "--tgt",
        str(tmp_path / "t.txt"), "--vocab_size", "12", "--max_len", "20", "--max_steps", "2",
        "--bleu_sentences", "0", "--valid_fraction", "0.1", "--test_fraction", "0",
    ])  # fmt: skip
    train(cfg, tmp_path / "run", progress=False)
    start = read_metrics(tmp_path / "run")[0]
    assert start["skipped_empty"] == 2
    assert start["filtered_long_train"] + start["filtered_long_valid"] == 1


def run_cli(args, capsys):
    code = main(args)
    return code, capsys.readouterr().err


@pytest.mark.parametrize(
    ("files", "message"),
    [
        ({"s.txt": "a\nb\nc\n", "t.txt": "x\ny\n"}, r"s.txt has 3 lines, .*t.txt has 2"),
        ({"s.txt": "a\nb\xff\n", "t.txt": "x\ny\n"}, r"s.txt: line 2 is not valid UTF-8"),
        ({"t.txt": "x\n"}, r"file not found: .*s.txt"),
    ],
    ids=["line counts", "utf-8", "missing"],
)
def test_data_errors_are_one_line_and_exit_2(tmp_path, capsys, files, message):
    for name, text in files.items():
        (tmp_path / name).write_bytes(text.encode("latin-1"))
    code, err = run_cli(
        [
            "train",
            "--src",
            str(tmp_path / "s.txt"),
            "--tgt",
            str(tmp_path / "t.txt"),
            "--out",
            str(tmp_path / "run"),
            "--quiet",
        ],
        capsys,
    )
    assert code == 2
    assert err.count("\n") == 1, err
    assert err.startswith("transformer train: error: ")
    import re

    assert re.search(message, err), err
    assert not (tmp_path / "run" / "checkpoints").exists()


@pytest.mark.parametrize("too_long", [False, True], ids=["none held out", "all too long"])
def test_training_without_validation_pairs_is_refused(tmp_path, capsys, too_long):
    """Without them the validation loss read 0.000 (perplexity 1.00), and chose the best
    checkpoint; nothing of the run is written."""
    src, tgt = reverse_files(tmp_path, 40, seed=0)
    options = ["--valid_fraction", "0", "--test_fraction", "0"]
    if too_long:
        (tmp_path / "vs.txt").write_text("a b c d e f g h " * 8 + "\n")
        (tmp_path / "vt.txt").write_text("h g f e d c b a " * 8 + "\n")
        options = ["--valid_src", str(tmp_path / "vs.txt"), "--valid_tgt", str(tmp_path / "vt.txt"),
                   "--max_len", "20"]  # fmt: skip
    code, err = run_cli(["train", "--src", str(src), "--tgt", str(tgt), "--preset", "tiny",
                         "--vocab_size", "20", "--max_steps", "2", "--out",
                         str(tmp_path / "run"), "--quiet", *options], capsys)  # fmt: skip
    assert code == 2 and err.count("\n") == 1, err
    expected = ("every one (1) is longer than data.max_len=20" if too_long
                else "the split is empty")  # fmt: skip
    assert f"no validation pairs: {expected}" in err, err
    assert not (tmp_path / "run").exists()


def test_shared_embeddings_over_two_vocabularies_are_refused(tmp_path, capsys):
    """Two SentencePiece models of the same size trained, with source piece i and target piece
    i (unrelated) sharing one embedding row; sizes that differed were already an error."""
    src, tgt = reverse_files(tmp_path, 40, seed=0)  # the same letters: the same vocabulary size
    options = ["--src", str(src), "--tgt", str(tgt), "--preset", "tiny", "--vocab_size", "20",
               "--max_steps", "1", "--out", str(tmp_path / "run"), "--quiet",
               "--share_embeddings", "true"]  # fmt: skip
    code, err = run_cli(["train", *options, "--joint_vocab", "false"], capsys)
    assert code == 2 and err.count("\n") == 1, err
    assert "model.share_embeddings needs data.joint_vocab: true" in err, err
    assert not (tmp_path / "run").exists()
    assert run_cli(["train", *options], capsys)[0] == 0  # one vocabulary: shared


def test_a_new_run_takes_its_first_step_whatever_its_time_limit(tmp_path):
    """A limit of 1e-320 minutes ended the run at step 0, leaving a model folder without a
    checkpoint and exit 0."""
    result = train(config("--max_minutes", "1e-320"), tmp_path / "run", progress=False)
    assert result.step == 1
    assert read_index(tmp_path / "run" / "checkpoints")  # one checkpoint, which translates
    load_checkpoint(tmp_path / "run", "last")


def test_unknown_config_key_is_an_error(tmp_path, capsys):
    (tmp_path / "c.yaml").write_text("train:\n  max_stepz: 3\n")
    code, err = run_cli(
        ["train", "--config", str(tmp_path / "c.yaml"), "--out", str(tmp_path / "r")], capsys
    )
    assert code == 2 and "unknown config key train.max_stepz; did you mean train.max_steps" in err
    code, err = run_cli(["train", "--warmup", "3", "--out", str(tmp_path / "r")], capsys)
    assert code == 2 and "unknown option --warmup; did you mean --train.warmup_steps?" in err
    assert not (tmp_path / "r").exists()


def test_metrics_log_and_checkpoint_contents(tmp_path):
    cfg = config("--max_steps", "10", "--save_every", "5", "--validate_every", "5")
    train(cfg, tmp_path / "run", progress=False)
    rows = read_metrics(tmp_path / "run")
    assert [r["step"] for r in rows if "loss" in r] == [5, 10]
    assert [r["step"] for r in rows if "valid_loss" in r] == [5, 10]
    assert all({"ppl", "tokens_per_s", "lr"} <= r.keys() for r in rows if "loss" in r)
    folder = tmp_path / "run/checkpoints/step_00000010"
    assert sorted(p.name for p in folder.iterdir()) == [
        "config.json",
        "model.safetensors",
        "trainer.pt",
    ]
    saved = json.loads((folder / "config.json").read_text())
    src = Tokenizer.load(tmp_path / "run/tokenizer/src.model")
    assert saved["model"]["src_vocab_size"] == src.vocab_size
    assert os.path.exists(tmp_path / "run/tokenizer/src.model")


def test_gradient_accumulation_takes_several_batches_per_update(tmp_path):
    cfg = config("--max_steps", "3", "--accumulate", "2", "--max_tokens", "200")
    train(cfg, tmp_path / "run", progress=False)
    state = torch.load(tmp_path / "run/checkpoints/step_00000003/trainer.pt", weights_only=True)
    position = state["position"]
    per_epoch_positions = (position["epoch"], position["batch"])
    assert state["step"] == 3
    assert per_epoch_positions == (0, 6)  # 3 updates x 2 batches (the epoch has more)
    assert state["optimizer"]["state"][0]["step"].item() == 3  # one Adam step per update


def test_accumulated_gradient_is_the_token_weighted_mean(tmp_path):
    # Two batches accumulated = their union in one batch (the loss is normalised by all tokens).
    from transformer.config import ModelConfig
    from transformer.data.batching import Example, collate
    from transformer.model import Transformer
    from transformer.training.loss import label_smoothed_nll

    torch.manual_seed(0)
    model = Transformer(
        ModelConfig.preset("tiny", src_vocab_size=20, tgt_vocab_size=20, dropout=0.0)
    )
    a = [Example([5, 6, 7, 3], [8, 9]), Example([5, 3], [8, 9, 10, 11])]
    b = [Example([6, 6, 3], [9])]

    def grads(batches):
        model.zero_grad()
        n = sum(batch.n_tokens for batch in batches)
        for batch in batches:
            label_smoothed_nll(model(batch.src, batch.tgt_in), batch.tgt_out, 0.1).loss.div(
                n
            ).backward()
        return [p.grad.clone() for p in model.parameters()]

    separate = grads([collate(a), collate(b)])
    together = grads([collate(a + b)])
    for g1, g2 in zip(separate, together, strict=True):
        torch.testing.assert_close(g1, g2, atol=1e-6, rtol=1e-4)


def test_bf16_autocast_trains(tmp_path):
    cfg = config("--max_steps", "6", "--precision", "bf16", "--log_every", "3")
    train(cfg, tmp_path / "run", progress=False)
    losses = [row["loss"] for row in read_metrics(tmp_path / "run") if "loss" in row]
    assert len(losses) == 2 and all(loss == loss and loss < 10 for loss in losses)


def test_gradient_clipping_bounds_the_global_norm():
    from transformer.config import ModelConfig
    from transformer.model import Transformer
    from transformer.training.optimizer import clip_gradients

    torch.manual_seed(0)
    model = Transformer(ModelConfig.preset("tiny", src_vocab_size=20, tgt_vocab_size=20))
    (model(torch.tensor([[5, 6, 3]]), torch.tensor([[2, 7, 8]])) ** 2).sum().backward()
    before = torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in model.parameters()]))
    assert clip_gradients(model, clip_norm=0.0) == pytest.approx(
        before.item(), rel=1e-6
    )  # no clipping
    assert before > 1.0
    assert clip_gradients(model, clip_norm=1.0) == pytest.approx(
        before.item(), rel=1e-6
    )  # norm before
    after = torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in model.parameters()]))
    assert after.item() == pytest.approx(1.0, rel=1e-4)


def test_a_resumed_run_saves_its_new_settings_and_translates_with_its_search(tmp_path):
    """--resume may change the train limits and the search (decode): the run's config.json
    then holds them, so that every checkpoint translates with the search asked for last, and a
    later --resume starts from them (the checkpoints saved before keep their own copy)."""
    from transformer.inference import load_torch_engine

    out = tmp_path / "run"
    main(["train", *TINY_NUMBERS, "--max_steps", "10", "--save_every", "5", "--out", str(out)])
    first = json.loads((out / "config.json").read_text())
    assert (first["train"]["max_steps"], first["decode"]["beam_size"]) == (10, 4)
    code = main(["train", *TINY_NUMBERS, "--max_steps", "15", "--save_every", "5", "--out",
                 str(out), "--resume", "--beam_size", "2", "--nbest", "2"])  # fmt: skip
    assert code == 0
    now = json.loads((out / "config.json").read_text())
    assert (now["train"]["max_steps"], now["decode"]["beam_size"], now["decode"]["nbest"]) == (
        15, 2, 2)  # fmt: skip
    assert {k: v for k, v in now.items() if k not in ("train", "decode")} == {
        k: v for k, v in first.items() if k not in ("train", "decode")}  # fmt: skip
    before = json.loads((out / "checkpoints" / "step_00000010" / "config.json").read_text())
    assert before["decode"]["beam_size"] == 4  # as it was saved
    engine = load_torch_engine(out / "checkpoints" / "step_00000010")
    assert engine.decode.beam_size == 4
    for which in ("best", "last"):
        engine = load_torch_engine(out, which)
        assert (engine.decode.beam_size, engine.decode.nbest) == (2, 2)
