"""The benchmark scripts still run against the library as it is (they are run by hand, so a
change to an API they call would otherwise show only when someone next measures)."""

import re
import subprocess
import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


def test_translate_speed_runs_a_trained_model_on_its_test_split(numbers_model, tmp_path):
    out = tmp_path / "table.md"
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / "translate_speed.py"), "--model", str(numbers_model),
         "--settings", "run", "--engines", "torch,torch-serial", "--threads", "1",
         "--rounds", "1", "--limit", "6", "--markdown", str(out)],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
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
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / "profile_decode.py"), "--sizes", "small",
         "--searches", "greedy", "--sentences", "4", "--steps", "3", "--rounds", "1",
         "--top", "40", "--report", str(out)],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    report = out.read_text()
    assert "weights packed" in report
    from transformer.model.linear import can_pack

    if can_pack():  # the packed layers multiply through oneDNN: counted, and as products
        assert "| `mkldnn::_linear_pointwise` |" in report
        products = re.search(r"\| matrix products[^|]*\| ([\d.]+)% \|", report)
        assert products and float(products.group(1)) > 20, report
