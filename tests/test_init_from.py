"""``transformer train --init_from MODEL_DIR``: fine-tuning an imported model or one of ours.

References and invariants: the step-0 validation equals the starting model's loss on the same
pairs, computed without our training code (Hugging Face's own loss for an imported Marian
model, a plain cross-entropy for ours), so training starts from its weights; a few steps on new
pairs lower their loss; no SentencePiece model is trained (the run's tokenizer files are the
starting model's, byte for byte), and a multilingual model's training data carries its
``>>xxx<<`` token; the optimizer and schedule start afresh (the learning rate is the schedule's
at the run's own step). A model key that would change the architecture is refused in one line.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from transformer.config import TrainConfig
from transformer.data.batching import encode_source, pad
from transformer.data.tokenizer import Tokenizers
from transformer.hub import import_marian
from transformer.model_dir.checkpoints import load_checkpoint, read_config
from transformer.training.loop import train
from transformer.training.schedule import learning_rate
from transformer.vocab import BOS_ID, EOS_ID, PAD_ID

from helpers import Result, cli, one_line_error, snapshot, train_config
from marian_models import Shape, load_hf, marian_folder, number_words

STEPS = 30


def new_pairs(folder: Path, n: int = 40) -> list[str]:
    """Pairs the starting models never saw (the held-out numbers), as files; the options that
    train and validate on them."""
    pairs = number_words()[1][:n]
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "pairs.en").write_text("".join(f"{s}\n" for s, _ in pairs))
    (folder / "pairs.fr").write_text("".join(f"{t}\n" for _, t in pairs))
    files = [str(folder / "pairs.en"), str(folder / "pairs.fr")]
    return ["--corpus", "null", "--src", files[0], "--tgt", files[1], "--valid_src", files[0],
            "--valid_tgt", files[1], "--max_steps", str(STEPS), "--validate_every", str(STEPS),
            "--log_every", "10", "--warmup_steps", "10", "--peak_lr", "2e-3",
            "--label_smoothing", "0.1", "--bleu_sentences", "0", "--max_tokens", "600"]  # fmt: skip


def validations(run: Path) -> dict[int, dict]:
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return {row["step"]: row for row in rows if "valid_nll" in row}


def hf_nll(folder: Path, pairs: list[tuple[str, str]], prefix: str = "") -> float:
    """Hugging Face's own mean cross-entropy per target token (</s> included)."""
    model, tokenizer = load_hf(folder)
    batch = tokenizer([prefix + s for s, _ in pairs], text_target=[t for _, t in pairs],
                      return_tensors="pt", padding=True)  # fmt: skip
    batch["labels"][batch["labels"] == model.config.pad_token_id] = -100
    with torch.no_grad():
        return float(model(**batch).loss)


@pytest.mark.slow  # trains
@pytest.mark.parametrize("shape", [Shape(), Shape(languages=("fra", "ita"), seed=3)],
                         ids=["single", "multilingual"])  # fmt: skip
def test_fine_tuning_an_imported_model_starts_from_it(tmp_path, shape):
    folder = marian_folder(tmp_path / "hf", shape)
    import_marian(str(folder), tmp_path / "imported")
    language = ["--target_language", shape.languages[0]] if shape.languages else []
    args = ["--init_from", str(tmp_path / "imported"), *new_pairs(tmp_path), *language]
    result = train(train_config(args), tmp_path / "run", progress=False)
    seen = validations(tmp_path / "run")
    prefix = f">>{shape.languages[0]}<< " if shape.languages else ""
    assert seen[0]["valid_nll"] == pytest.approx(hf_nll(folder, number_words()[1][:40], prefix),
                                                 abs=1e-4)  # fmt: skip
    assert seen[STEPS]["valid_nll"] < seen[0]["valid_nll"]  # the new pairs are learned
    for name in ("src.model", "tgt.model", "src.pieces.json", "tgt.pieces.json"):
        tokenizer = Path("tokenizer", name)
        assert (tmp_path / "run" / tokenizer).read_bytes() == (
            tmp_path / "imported" / tokenizer
        ).read_bytes()
    rows = [
        json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    ]
    first = next(row for row in rows if "lr" in row)
    config = load_checkpoint(result.out_dir).config
    assert first["lr"] == pytest.approx(learning_rate(first["step"], 0.0, config.model.d_model,
                                                      config.train))  # fmt: skip
    assert config.train.init_from == str(tmp_path / "imported") and result.step == STEPS


@pytest.mark.slow  # trains
def test_fine_tuning_a_model_trained_here_starts_from_it(numbers_model, tmp_path):
    args = ["--init_from", str(numbers_model), *new_pairs(tmp_path)]
    train(train_config(args), tmp_path / "run", progress=False)
    seen = validations(tmp_path / "run")
    start = load_checkpoint(numbers_model).model  # the best checkpoint, as --init_from takes
    tokenizers = Tokenizers.load(numbers_model, read_config(numbers_model).model.vocab_sizes)
    pairs = number_words()[1][:40]
    src = pad([encode_source(tokenizers.src.encode(s)) for s, _ in pairs])
    targets = [tokenizers.tgt.encode(t) for _, t in pairs]
    with torch.no_grad():
        logits = start(src, pad([[BOS_ID, *t] for t in targets]))  # (B, T, V)
    gold = pad([[*t, EOS_ID] for t in targets])
    nll = F.cross_entropy(logits.flatten(0, 1), gold.flatten(), ignore_index=PAD_ID)
    assert seen[0]["valid_nll"] == pytest.approx(float(nll), abs=1e-5)
    assert seen[STEPS]["valid_nll"] < seen[0]["valid_nll"]
    assert (tmp_path / "run" / "tokenizer").is_dir()
    for name in (p.name for p in (numbers_model / "tokenizer").iterdir()):
        assert (tmp_path / "run" / "tokenizer" / name).read_bytes() == (
            numbers_model / "tokenizer" / name
        ).read_bytes()


def test_what_fine_tuning_cannot_do_is_refused(numbers_model, tmp_path, capsys):
    args = ["train", "--init_from", str(numbers_model), *new_pairs(tmp_path / "data")]
    before = snapshot(tmp_path)
    cases = {
        ("--d_model", "64", "--out", str(tmp_path / "a")): "model.d_model is 32 there, 64 here",
        ("--init_from", str(tmp_path / "none"), "--out", str(tmp_path / "b")): "not found",
        ("--target_language", "fra", "--out", str(tmp_path / "c")): "no target-language tokens",
    }
    for extra, needle in cases.items():
        capsys.readouterr()
        code, _, err = cli([*args, *extra], capsys)
        one_line_error(Result(code, "", err.splitlines()), 2, needle)
    assert snapshot(tmp_path) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data"]
    assert TrainConfig().init_from is None  # training from scratch stays the default
