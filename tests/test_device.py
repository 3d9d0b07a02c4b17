"""The device option end to end. On the CPU (in `make test`): explicit cpu, auto without a GPU,
cuda without one as a clear error, checkpoints read with a map_location, precisions, and the
RNG state. Marked `gpu` (skipped without CUDA; run on a machine with a GPU): training, exact
resume, GPU-trained = CPU-translated, compiled = eager."""

from __future__ import annotations

import json
import random

import pytest
import torch

from transformer.cli import main
from transformer.config import RuntimeConfig, build_config, merge
from transformer.device import autocast, resolve_device, rng_state, set_rng_state
from transformer.errors import BadValue
from transformer.inference.engine import load_torch_engine
from transformer.model_dir.checkpoints import load_checkpoint
from transformer.model_dir.runs import resumed_config
from transformer.training.chunked_loss import TrainingLoss
from transformer.training.loop import train
from transformer.vocab import PAD_ID

from helpers import cli_main, one_line_error, train_config, weights

HAS_CUDA = torch.cuda.is_available()
TINY = [
    "--preset", "tiny", "--corpus", "numbers", "--numbers_max", "999", "--numbers_train", "300",
    "--numbers_valid", "20", "--numbers_test", "20", "--vocab_size", "60", "--max_tokens", "512",
    "--warmup_steps", "20", "--bleu_sentences", "0", "--log_every", "2", "--save_every", "4",
    "--validate_every", "4",
]  # fmt: skip
gpu = pytest.mark.gpu


def test_explicit_cpu(tmp_path):
    assert resolve_device("cpu") == torch.device("cpu")
    train(train_config([*TINY, "--max_steps", "4", "--device", "cpu"]), tmp_path / "run",
          progress=False)  # fmt: skip
    rows = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    assert json.loads(rows[0])["device"] == "cpu"


@pytest.mark.skipif(HAS_CUDA, reason="this machine has a GPU")
def test_auto_without_a_gpu_is_the_cpu():
    assert resolve_device("auto") == torch.device("cpu")


@pytest.mark.slow
@pytest.mark.skipif(HAS_CUDA, reason="this machine has a GPU")
@pytest.mark.parametrize("command", ["train", "translate"])
def test_cuda_without_a_gpu_is_a_clear_error(tmp_path, command):
    args = {"train": ["train", "--out", str(tmp_path / "run"), *TINY],
            "translate": ["translate", str(tmp_path / "nowhere")]}[command]  # fmt: skip
    result = cli_main(*args, "--device", "cuda", stdin="")
    one_line_error(result, 2, "runtime.device is 'cuda' but this machine has no CUDA device")
    assert not (tmp_path / "run").exists()


def test_bad_device_and_precision_names(capsys):
    with pytest.raises(BadValue, match="auto, cpu, cuda or cuda:N, got 'gpu'"):
        RuntimeConfig(device="gpu")
    assert main(["info", "--model.preset", "tiny"]) == 0
    capsys.readouterr()
    code = main(["translate", "x", "--precision", "fp8"])
    expected = "precision must be one of ('fp32', 'bf16', 'fp16', 'auto')"
    assert code == 2 and expected in capsys.readouterr().err


def test_checkpoints_load_onto_the_device_asked_for(numbers_model):
    loaded = load_checkpoint(numbers_model, device="cpu")
    assert {p.device.type for p in loaded.model.parameters()} == {"cpu"}
    translator = load_torch_engine(numbers_model, runtime=RuntimeConfig(device="cpu"))
    assert next(translator.model.parameters()).device.type == "cpu"


def test_the_saved_runtime_is_not_imposed_on_translation(numbers_model, tmp_path):
    # A model trained with device cuda translates on a machine without one.
    import shutil

    copy = tmp_path / "model"
    shutil.copytree(numbers_model, copy)
    for config in copy.rglob("config.json"):
        values = json.loads(config.read_text())
        values["runtime"] = {"device": "cuda", "precision": "bf16"}
        config.write_text(json.dumps(values))
    translator = load_torch_engine(copy)
    assert translator.runtime == RuntimeConfig()
    assert translator.config.runtime.device == "cuda"


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_mixed_precision_trains_on_the_cpu(tmp_path, precision):
    cfg = train_config([*TINY, "--max_steps", "4", "--device", "cpu", "--precision", precision])
    train(cfg, tmp_path / "run", progress=False)
    state = torch.load(tmp_path / "run/checkpoints/step_00000004/trainer.pt", weights_only=True)
    assert bool(state["scaler"]) == (precision == "fp16")  # the scaler is saved for fp16
    assert all(
        torch.isfinite(t).all()
        for t in weights(tmp_path / "run/checkpoints/step_00000004").values()
    )


def test_autocast_follows_the_precision():
    x = torch.randn(4, 4)
    with autocast(torch.device("cpu"), "bf16"):
        assert (x @ x).dtype == torch.bfloat16
    with autocast(torch.device("cpu"), "fp32"):
        assert (x @ x).dtype == torch.float32


def test_rng_state_round_trip():
    state = rng_state()
    expected = (random.random(), torch.rand(3))
    set_rng_state(state)
    assert random.random() == expected[0] and torch.equal(torch.rand(3), expected[1])


def test_a_key_in_the_wrong_section_is_named():
    with pytest.raises(BadValue, match=r"unknown config key train.threads"):
        build_config({"train": {"threads": 2}})


# ------------------------------------------------------------------------ on a GPU only
@gpu
def test_a_few_training_steps_on_cuda(tmp_path):
    cfg = train_config([*TINY, "--max_steps", "8", "--device", "cuda"])
    train(cfg, tmp_path / "run", progress=False)
    rows = [json.loads(r) for r in (tmp_path / "run/metrics.jsonl").read_text().splitlines()]
    assert rows[0]["device"].startswith("cuda")
    losses = [r["loss"] for r in rows if "loss" in r]
    assert losses[-1] < losses[0]


@gpu
@pytest.mark.parametrize("precision", ["fp32", "bf16", "fp16"])
def test_an_exact_resume_on_cuda(tmp_path, precision, monkeypatch):
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(True)
    try:
        args = [*TINY, "--device", "cuda", "--precision", precision, "--dropout", "0.1"]
        train(train_config([*args, "--max_steps", "8"]), tmp_path / "whole", progress=False)
        train(train_config([*args, "--max_steps", "4"]), tmp_path / "split", progress=False)
        saved = resumed_config(tmp_path / "split").to_dict()  # what --resume continues
        resumed = build_config(merge(saved, {"train": {"max_steps": 8}}))
        train(resumed, tmp_path / "split", resume=True, progress=False)
    finally:
        torch.use_deterministic_algorithms(False)
    whole, split = (
        weights(tmp_path / f"{name}/checkpoints/step_00000008") for name in ("whole", "split")
    )
    for name in whole:
        assert torch.equal(whole[name], split[name]), name


@gpu
def test_a_gpu_trained_checkpoint_translates_the_same_on_the_cpu(tmp_path):
    train(train_config([*TINY, "--max_steps", "40", "--device", "cuda"]), tmp_path / "run",
          progress=False)  # fmt: skip
    sentences = ["twelve", "seven hundred and one", "eighty", "three hundred"]
    outputs = []
    for device in ("cuda", "cpu"):
        t = load_torch_engine(tmp_path / "run", runtime=RuntimeConfig(device=device), beam_size=1)
        from transformer.inference import translate

        outputs.append(translate(t.model, t.tokenizers, sentences, t.decode).best)
    assert outputs[0] == outputs[1]


@gpu
def test_compiled_equals_eager_in_fp32():
    from transformer import ModelConfig, Transformer

    torch.manual_seed(0)
    model = Transformer(ModelConfig.preset("tiny", src_vocab_size=50, tgt_vocab_size=50)).cuda()
    model.eval()
    src = torch.randint(4, 50, (8, 13), device="cuda")
    tgt = torch.randint(4, 50, (8, 11), device="cuda")
    eager = model(src, tgt)
    compiled = torch.compile(model, dynamic=True)(src, tgt)
    assert (compiled - eager).abs().max().item() < 1e-5


def test_without_a_compiler_compile_runs_uncompiled_with_one_line(monkeypatch, capsys):
    monkeypatch.setenv("PATH", "")
    monkeypatch.delenv("CXX", raising=False)
    model = tiny_model_for_loss()
    with_loss = TrainingLoss(model, 0.1, 4, compile=True)
    err = capsys.readouterr().err
    assert err.count("\n") == 2  # the model and the loss, one line each
    assert "runs uncompiled: no C++ compiler ($CXX, g++, c++ or clang++) on PATH" in err
    src, tgt = torch.tensor([[5, 6, 7, 3]]), torch.tensor([[2, 8, 9, 3]])
    sums = with_loss(src, tgt[:, :-1], tgt[:, 1:])
    assert sums.loss == TrainingLoss(model, 0.1, 4)(src, tgt[:, :-1], tgt[:, 1:]).loss


def tiny_model_for_loss():
    from transformer import ModelConfig, Transformer

    torch.manual_seed(0)
    config = ModelConfig.preset("tiny", src_vocab_size=50, tgt_vocab_size=50, dropout=0.0)
    return Transformer(config).eval()


@gpu
def test_the_compiled_training_loss_equals_the_eager_one_for_any_shape():
    """fp32: compiled = eager. bf16: the compiled step is as close to fp32 as the eager one (its
    fused kernels round in another order, so the two bf16 results differ by bf16 noise)."""
    model = tiny_model_for_loss().cuda()
    compiled, eager = (TrainingLoss(model, 0.1, 16, compile=c) for c in (True, False))
    for b, s, t in [(8, 13, 12), (5, 30, 41), (16, 9, 7)]:
        src = torch.randint(4, 50, (b, s), device="cuda")
        tgt = torch.randint(4, 50, (b, t), device="cuda")
        src[0, -3:], tgt[1, -2:] = PAD_ID, PAD_ID

        def run(with_loss, precision, src=src, tgt=tgt):
            model.zero_grad()
            with autocast(torch.device("cuda"), precision):
                sums = with_loss(src, tgt[:, :-1], tgt[:, 1:])
            sums.loss.backward()
            return sums.loss.item(), torch.cat([p.grad.flatten() for p in model.parameters()])

        loss, grad = run(eager, "fp32")
        loss_c, grad_c = run(compiled, "fp32")
        assert loss_c == pytest.approx(loss, rel=1e-5)
        torch.testing.assert_close(grad_c, grad, rtol=1e-4, atol=1e-4)
        (loss_cb, grad_cb), (loss_eb, grad_eb) = (run(f, "bf16") for f in (compiled, eager))
        assert loss_cb == pytest.approx(loss, rel=1e-2)
        error_compiled, error_eager = ((g - grad).norm() / grad.norm() for g in (grad_cb, grad_eb))
        assert error_compiled <= max(2 * error_eager, 1e-2), (error_compiled, error_eager)
