"""A training run's own files, damaged, through ``train --resume``: a ``trainer.pt`` that still
unpickles but is not a trainer state, and a binarized training set whose ids are not the ones
binarize wrote (read as another dtype, or beyond the vocabulary).

A damaged trainer state is skipped for an older checkpoint, as one that does not unpickle is
(tests/test_faults.py); damaged training data, and an optimizer state that does not fit the
model, are one line naming the file, with every file the user had left as it was.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from helpers import cli_main as cli
from helpers import one_line_error, snapshot

pytestmark = pytest.mark.slow  # every test here trains

STEP_10, STEP_20 = "step_00000010", "step_00000020"


@pytest.fixture
def run(tiny_run, tmp_path) -> Path:
    copy = tmp_path / "run"
    shutil.copytree(tiny_run, copy)
    return copy


def resume(run: Path, steps: int = 22):
    return cli("train", "--out", str(run), "--resume", "--quiet", "--max_steps", str(steps))


def damage_trainer(path: Path, change) -> None:
    torch.save(change(torch.load(path, weights_only=True)), path)


# ------------------------------------------------------------------------------ trainer.pt
TRAINER_DAMAGE = {
    "no step": (lambda s: {k: v for k, v in s.items() if k != "step"}, "(no step)"),
    "step a string": (lambda s: {**s, "step": "abc"}, "(its step is 'abc')"),
    "step negative": (lambda s: {**s, "step": -5}, "(its step is -5)"),
    "rng empty": (lambda s: {**s, "rng": {}}, "(its rng: not a dict"),
    "a list": (lambda s: [1, 2, 3], "(a list, not a dict)"),
}


@pytest.mark.parametrize("damage", TRAINER_DAMAGE)
def test_a_trainer_state_of_the_wrong_structure_is_skipped_for_an_older_one(run, damage):
    change, said = TRAINER_DAMAGE[damage]
    damaged = run / "checkpoints" / STEP_20 / "trainer.pt"
    damage_trainer(damaged, change)
    result = resume(run, 12)
    assert result.code == 0, result.stderr
    assert result.stderr[0].startswith(f"transformer train: warning: {damaged} is damaged {said}")
    assert STEP_10 in result.stderr[1]
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    resumed = [row for row in rows if row.get("event") == "resume"]
    assert len(resumed) == 1 and resumed[0]["step"] == 10 and resumed[0]["checkpoint"] == STEP_10


def test_an_optimizer_state_that_does_not_fit_the_model_is_one_line(run):
    damaged = run / "checkpoints" / STEP_20 / "trainer.pt"
    damage_trainer(damaged, lambda s: {**s, "optimizer": {**s["optimizer"], "param_groups": []}})
    before = snapshot(run)
    one_line_error(resume(run), 2, f"{damaged} is damaged", "does not fit the model")
    assert snapshot(run) == before


# -------------------------------------------------------------------- binarized training set
@pytest.mark.parametrize("side", ["src", "tgt"])
def test_an_id_beyond_the_vocabulary_is_refused_naming_the_file(run, side):
    ids = run / "data" / "train" / f"{side}.bin"
    array = np.fromfile(ids, dtype=np.uint16)
    array[5] = 65_000
    array.tofile(ids)
    before = snapshot(run)
    one_line_error(resume(run), 2, f"{ids} is damaged", "id 65,000", f"{side} vocabulary has")
    assert snapshot(run) == before


@pytest.mark.parametrize("dtype", ["float16", "int16", "uint8"])
def test_a_dtype_binarize_never_writes_is_refused(run, dtype):
    meta = run / "data" / "train" / "meta.json"
    meta.write_text(meta.read_text().replace('"uint16"', f'"{dtype}"'))
    before = snapshot(run)
    one_line_error(resume(run), 2, f"{meta} is damaged", f"dtype '{dtype}'")
    assert snapshot(run) == before
