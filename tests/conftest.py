"""Shared fixtures: one small trained model for the command-line tests."""

from pathlib import Path

import pytest
import torch

from transformer.cli import config_from_args
from transformer.training.loop import train

SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


@pytest.fixture(scope="session")
def numbers_model(tmp_path_factory) -> Path:
    """A tiny en->fr number-words model trained for a few seconds (it translates badly)."""
    out = tmp_path_factory.mktemp("numbers") / "model"
    args = [
        "--preset", "tiny", "--corpus", "numbers", "--numbers_max", "999",
        "--numbers_train", "400", "--numbers_valid", "20", "--numbers_test", "30",
        "--vocab_size", "80", "--max_tokens", "800",
        "--max_steps", "60", "--save_every", "20", "--validate_every", "20", "--warmup_steps", "10",
        "--peak_lr", "3e-3", "--bleu_sentences", "10", "--max_positions", "48",
        "--best_metric", "loss",  # BLEU on 10 sentences of a barely trained model is noise
    ]  # fmt: skip
    train(config_from_args(args), out, progress=False)
    return out


def pytest_collection_modifyitems(config, items):
    """Tests marked ``gpu`` need CUDA: without it they are skipped, with the reason."""
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device (torch.cuda.is_available() is False)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
