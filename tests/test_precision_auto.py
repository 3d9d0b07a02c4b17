"""``runtime.precision: auto``: bf16 for training where the CPU multiplies bf16 natively and the
model is wide enough to gain, fp32 elsewhere; for translation on a CPU, bf16 in the packed linear
layers of a wide model; the log says which."""

from __future__ import annotations

import json

import pytest
import torch

from transformer import device as device_module
from transformer.config import RuntimeConfig
from transformer.device import (
    BF16_MIN_D_MODEL,
    BF16_MIN_D_MODEL_TRANSLATION,
    native_bf16_cpu,
    resolve_precision,
)
from transformer.inference.engine import load_torch_engine
from transformer.model.linear import MIN_FEATURES
from transformer.training.loop import train

from helpers import cli, train_config

CPU = torch.device("cpu")
TINY = [
    "--preset", "tiny", "--corpus", "numbers", "--numbers_max", "99", "--numbers_train", "100",
    "--numbers_valid", "10", "--numbers_test", "10", "--vocab_size", "40", "--max_tokens", "256",
    "--warmup_steps", "5", "--bleu_sentences", "0", "--max_steps", "2", "--device", "cpu",
]  # fmt: skip


def cpuinfo(tmp_path, flags: str):
    path = tmp_path / "cpuinfo"
    path.write_text(
        f"processor\t: 0\nmodel name\t: Some CPU\nflags\t\t: fpu sse2 {flags}\n\n"
        f"processor\t: 1\nflags\t\t: fpu sse2 {flags}\n"
    )
    return path


@pytest.mark.parametrize(
    "flags, expected",
    [
        ("avx2 avx512f avx512_bf16 avx512_vnni", "avx512_bf16"),
        ("avx512f amx_tile amx_bf16 avx512_bf16", "amx_bf16"),  # AMX named first: the faster
        ("avx2 avx512f avx512bw avx512_vnni", None),  # AVX-512 without its bf16 extension
        ("avx2 fma", None),
    ],
)
def test_native_bf16_is_read_from_the_cpu_flags(tmp_path, flags, expected):
    assert native_bf16_cpu(cpuinfo(tmp_path, flags)) == expected


def test_no_cpuinfo_means_no_native_bf16(tmp_path):
    assert native_bf16_cpu(tmp_path / "missing") is None


@pytest.mark.parametrize("precision", ["fp32", "bf16", "fp16"])
def test_an_explicit_precision_is_kept(precision, monkeypatch):
    monkeypatch.setattr(device_module, "native_bf16_cpu", lambda: "avx512_bf16")
    for d_model in (32, 1024):
        assert resolve_precision(precision, CPU, d_model)[0] == precision


def test_auto_on_a_cpu_with_native_bf16(monkeypatch):
    monkeypatch.setattr(device_module, "native_bf16_cpu", lambda: "avx512_bf16")
    wide, why = resolve_precision("auto", CPU, BF16_MIN_D_MODEL)
    assert wide == "bf16" and "avx512_bf16" in why and f"d_model {BF16_MIN_D_MODEL}" in why
    narrow, why = resolve_precision("auto", CPU, BF16_MIN_D_MODEL - 1)
    assert narrow == "fp32" and "gains nothing" in why
    translating, why = resolve_precision("auto", CPU, 1024, training=False)
    assert translating == "bf16" and "packed linear layers" in why
    narrow = BF16_MIN_D_MODEL_TRANSLATION - 1
    assert resolve_precision("auto", CPU, narrow, training=False)[0] == "fp32"
    assert BF16_MIN_D_MODEL_TRANSLATION == MIN_FEATURES  # the narrowest model packed


def test_auto_on_a_cpu_without_native_bf16(monkeypatch):
    monkeypatch.setattr(device_module, "native_bf16_cpu", lambda: None)
    precision, why = resolve_precision("auto", CPU, 1024)
    assert precision == "fp32" and "no native bf16" in why


def test_auto_is_a_precision_on_the_command_line():
    assert RuntimeConfig(precision="auto").precision == "auto"
    assert train_config([*TINY, "--precision", "auto"]).runtime.precision == "auto"


@pytest.mark.slow
@pytest.mark.parametrize("flag, chosen", [("avx512_bf16", "bf16"), (None, "fp32")])
def test_training_logs_what_auto_chose(tmp_path, monkeypatch, capsys, flag, chosen):
    monkeypatch.setattr(device_module, "native_bf16_cpu", lambda: flag)
    monkeypatch.setattr(device_module, "BF16_MIN_D_MODEL", 16)  # the tiny preset is 32 wide
    train(train_config([*TINY, "--precision", "auto"]), tmp_path / "run", progress=False)
    start = json.loads((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()[0])
    assert start["event"] == "start" and start["precision"] == chosen
    assert start["precision_reason"].startswith(f"precision auto: {chosen}")
    assert start["precision_reason"] in capsys.readouterr().out  # on the console too


@pytest.mark.slow
def test_translation_with_auto_on_a_cpu_is_fp32(numbers_model, monkeypatch, capsys):
    monkeypatch.setattr(device_module, "native_bf16_cpu", lambda: "amx_bf16")
    monkeypatch.setattr(device_module, "BF16_MIN_D_MODEL", 16)  # wide enough to train in bf16
    engine = load_torch_engine(numbers_model, runtime=RuntimeConfig(precision="auto"))
    with engine.precision():
        assert not torch.is_autocast_enabled("cpu")
    outputs = []
    for precision in ("auto", "fp32"):
        args = ["translate", str(numbers_model), "--device", "cpu", "--precision", precision]
        code, out, _ = cli(args, capsys, stdin="twelve\nthree hundred\n", monkeypatch=monkeypatch)
        assert code == 0
        outputs.append(out)
    assert outputs[0] == outputs[1]
