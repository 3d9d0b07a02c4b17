"""`transformer info`: parameter counts per part."""

import math
import subprocess
import sys

import pytest
import torch

from transformer.cli import main
from transformer.config import ModelConfig
from transformer.inspect.info import parameter_table
from transformer.model import Transformer

from helpers import imported_by_command


def test_base_model_with_shared_37k_vocabulary_is_about_63m():
    cfg = ModelConfig.preset(
        "base", src_vocab_size=37000, tgt_vocab_size=37000, share_embeddings=True
    )
    rows = dict(parameter_table(Transformer(cfg)))
    D, F, V = 512, 2048, 37000
    attention = 4 * (D * D + D)
    feed_forward = D * F + F + F * D + D
    assert rows["encoder 1 self-attention"] == attention
    assert rows["decoder 6 encoder-decoder attention"] == attention
    assert rows["encoder 3 feed-forward"] == feed_forward
    assert rows["decoder 2 add & norm x3"] == 3 * 2 * D
    expected_total = (
        V * D + 6 * (attention + feed_forward + 4 * D) + 6 * (2 * attention + feed_forward + 6 * D)
    )
    assert rows["total"] == expected_total == sum(p.numel() for p in Transformer(cfg).parameters())
    # The paper (Table 3) reports 65M for the base model.
    assert 60e6 < rows["total"] < 66e6


def test_info_command_prints_the_table(capsys):
    code = main(
        [
            "info",
            "--preset",
            "base",
            "--src-vocab-size",
            "37000",
            "--tgt-vocab-size",
            "37000",
            "--share-embeddings",
        ]
    )
    out = capsys.readouterr().out
    assert code == 0
    assert "encoder 6 feed-forward" in out and "decoder 1 masked self-attention" in out
    assert "63,082,496" in out


def test_info_with_bad_values_is_one_line_error(capsys):
    code = main(
        [
            "info",
            "--preset",
            "base",
            "--src-vocab-size",
            "100",
            "--tgt-vocab-size",
            "200",
            "--share-embeddings",
        ]
    )
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and "share_embeddings" in err


def test_info_describes_a_trained_model_directory(numbers_model, capsys):
    from transformer.model_dir.checkpoints import load_checkpoint

    code = main(["info", str(numbers_model)])
    out = capsys.readouterr().out
    model = load_checkpoint(numbers_model).model
    assert code == 0 and "step_" in out.splitlines()[0]
    assert f"{sum(p.numel() for p in model.parameters()):,}" in out
    config = model.config
    assert f"vocab={config.src_vocab_size}/{config.tgt_vocab_size}" in out


def test_info_of_a_large_model_allocates_nothing():
    # Built on the meta device: 242M parameters (0.97 GB of float32) are only described. The
    # process's peak memory (342 MiB measured, 223 of them importing torch and the package)
    # stays far below one copy of the weights.
    args = ["info", "--preset", "big", "--d_model", "1024", "--n_heads", "16", "--d_ff", "4096",
            "--src_vocab_size", "32000", "--tgt_vocab_size", "32000"]  # fmt: skip
    code = (
        "import sys\n"
        "from transformer.cli import main\n"
        f"code = main({args!r})\n"
        "print(open('/proc/self/status').read().split('VmHWM:')[1].split()[0], file=sys.stderr)\n"
        "sys.exit(code)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)  # fmt: skip
    assert done.returncode == 0 and "241,893,376" in done.stdout, done.stderr
    # VmHWM: this process's own peak (ru_maxrss would carry the forking parent's, pytest's)
    peak_mib = int(done.stderr.strip().splitlines()[-1]) / 1024  # kB
    assert peak_mib < 700, f"info peaked at {peak_mib:.0f} MiB"


def test_info_takes_a_model_directory_or_model_options_not_both(numbers_model, capsys):
    assert main(["info", str(numbers_model), "--d_model", "64"]) == 2
    assert "not both" in capsys.readouterr().err


@pytest.mark.parametrize("architecture", ["transformer", "rnn"])
def test_info_imports_neither_the_compiler_nor_matplotlib(architecture):
    # A model built for its shapes on the meta device draws nothing and makes its sinusoidal
    # table on the CPU: a random draw or an `arange` on the meta device imports torch._dynamo
    # (and sympy), and the figures' matplotlib is imported only to draw. `info` took 3.6 s,
    # 1.2 s of them those imports. An RNN's parameters are counted on the meta device.
    result, late = imported_by_command(
        ["info", "--preset", "small", "--architecture", architecture],
        ("torch._dynamo", "sympy", "matplotlib"),
    )
    assert result.code == 0 and "total" in result.stdout, result.stderr
    assert late == [], result.stderr


def test_a_model_built_for_its_shapes_holds_nothing_and_counts_as_built():
    from transformer.model import build_model, shapes_only, sinusoidal_table

    for positional in ("sinusoidal", "learned"):
        config = ModelConfig.preset("small", positional=positional, src_vocab_size=300,
                                    tgt_vocab_size=400)  # fmt: skip
        shapes, built = shapes_only(config), build_model(config)
        assert all(t.is_meta for t in [*shapes.parameters(), *shapes.buffers()])
        assert [(n, p.shape) for n, p in shapes.named_parameters()] == [
            (n, p.shape) for n, p in built.named_parameters()
        ]
        assert dict(parameter_table(shapes)) == dict(parameter_table(built))
    table = sinusoidal_table(50, 16)  # on the CPU, as before: sin at even, cos at odd columns
    assert table.device.type == "cpu" and table.dtype == torch.float32
    assert torch.allclose(table[7, 2], torch.tensor(math.sin(7 / 10000 ** (2 / 16))))
    assert torch.allclose(table[7, 3], torch.tensor(math.cos(7 / 10000 ** (2 / 16))))
