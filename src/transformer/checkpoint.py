"""Checkpoints: written atomically, so a crash (even SIGKILL) always leaves the last good one.

A model directory looks like this:

    OUT/config.json                  the RunConfig, with the real vocabulary sizes
    OUT/tokenizer/                   the SentencePiece model(s)
    OUT/metrics.jsonl                one JSON object per log line / validation
    OUT/checkpoints/index.json       {"last": "step_00001000", "best": "step_00000800", ...}
    OUT/checkpoints/step_00001000/   model.safetensors, config.json, trainer.pt

A checkpoint is first written to a hidden temporary folder, flushed to disk, then renamed into
place; only then does ``index.json`` (replaced atomically with ``os.replace``) point to it. The
trainer state (optimizer, step, RNG and data-order state) makes ``--resume`` continue exactly.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from .config import RunConfig
from .errors import UserError
from .model import Transformer

WEIGHTS = "model.safetensors"
CONFIG = "config.json"
TRAINER = "trainer.pt"
INDEX = "index.json"


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_json_atomic(path: Path, value: object) -> None:
    """Writes JSON to ``path`` via a temporary file and ``os.replace`` (never half-written)."""
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(value, f, indent=2)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    _fsync_dir(path.parent)


def model_state(model: Transformer) -> dict[str, torch.Tensor]:
    """The weights to save. ``named_parameters`` lists a tied tensor once, under its first name
    (safetensors refuses two names for one storage)."""
    return {name: p.detach().contiguous() for name, p in model.named_parameters()}


def save_checkpoint(
    checkpoints: Path, name: str, model: Transformer, config: RunConfig, trainer: dict | None
) -> Path:
    """Writes checkpoint ``name`` atomically and returns its folder (index.json is not touched)."""
    checkpoints.mkdir(parents=True, exist_ok=True)
    final = checkpoints / name
    tmp = checkpoints / f".tmp-{name}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    save_file(model_state(model), str(tmp / WEIGHTS), metadata={"format": "pt"})
    (tmp / CONFIG).write_text(json.dumps(config.to_dict(), indent=2), encoding="utf-8")
    if trainer is not None:
        torch.save(trainer, tmp / TRAINER)
    for file in tmp.iterdir():
        with open(file, "rb") as f:
            os.fsync(f.fileno())
    if final.exists():  # re-saving the same step (e.g. after a resume): replace it
        shutil.rmtree(final)
    os.rename(tmp, final)
    _fsync_dir(checkpoints)
    return final


def read_index(checkpoints: Path) -> dict:
    path = checkpoints / INDEX
    if not path.exists():
        return {}
    return json.loads(path.read_text(encoding="utf-8"))


def update_index(checkpoints: Path, **entries: object) -> dict:
    """Points ``last`` / ``best`` (and any other key) at checkpoint folders, atomically."""
    index = read_index(checkpoints)
    index.update(entries)
    write_json_atomic(checkpoints / INDEX, index)
    return index


def prune_checkpoints(checkpoints: Path, keep: int) -> None:
    """Deletes the oldest ``step_*`` folders beyond ``keep``, never the ones index.json names."""
    index = read_index(checkpoints)
    protected = {v for v in index.values() if isinstance(v, str)}
    steps = step_checkpoints(checkpoints)
    for old in steps[: max(len(steps) - keep, 0)]:
        if old.name not in protected:
            shutil.rmtree(old)
    for stale in checkpoints.glob(".tmp-*"):  # left by a crash during a save
        shutil.rmtree(stale, ignore_errors=True)


def step_checkpoints(checkpoints: Path) -> list[Path]:
    """The ``step_*`` checkpoint folders, oldest first."""
    return sorted(p for p in checkpoints.glob("step_*") if (p / WEIGHTS).exists())


@dataclass
class Loaded:
    """A model ready to use, with its config and the folder it came from."""

    model: Transformer
    config: RunConfig
    path: Path


def resolve_checkpoint(path: Path, which: str = "best") -> Path:
    """A checkpoint folder from a model directory (via index.json) or a checkpoint folder."""
    if (path / WEIGHTS).exists():
        return path
    checkpoints = path / "checkpoints"
    index = read_index(checkpoints)
    for key in (which, "last"):
        if key in index and (checkpoints / index[key] / WEIGHTS).exists():
            return checkpoints / index[key]
    if not path.exists():
        raise UserError(f"model directory not found: {path}")
    raise UserError(f"{path} holds no checkpoint (expected {checkpoints / INDEX} or {WEIGHTS})")


def load_checkpoint(path: Path, which: str = "best") -> Loaded:
    """Loads a model (in eval mode) from a model directory or a checkpoint folder."""
    folder = resolve_checkpoint(Path(path), which)
    try:
        config = RunConfig.from_dict(json.loads((folder / CONFIG).read_text(encoding="utf-8")))
    except (OSError, json.JSONDecodeError) as error:
        raise UserError(f"cannot read {folder / CONFIG}: {error}") from None
    model = Transformer(config.model)
    load_weights(model, folder / WEIGHTS)
    return Loaded(model.eval(), config, folder)


def load_weights(model: Transformer, path: Path) -> None:
    """Copies safetensors weights into ``model``; names and shapes must match exactly."""
    state = load_file(str(path))
    expected = model_state(model)
    if set(state) != set(expected):
        missing, unexpected = set(expected) - set(state), set(state) - set(expected)
        raise UserError(f"{path}: weights do not match the model (missing {sorted(missing)[:3]}, "
                        f"unexpected {sorted(unexpected)[:3]})")  # fmt: skip
    with torch.no_grad():
        for name, param in model.named_parameters():
            param.copy_(state[name])


def load_trainer_state(folder: Path) -> dict:
    """The optimizer / step / RNG / data-order state saved next to the weights."""
    path = folder / TRAINER
    if not path.exists():
        raise UserError(f"{folder} has no trainer state ({TRAINER}); it cannot be resumed")
    return torch.load(path, weights_only=True)


def model_dir_of(folder: Path) -> Path:
    """The model directory a checkpoint folder belongs to (``OUT/checkpoints/NAME`` -> ``OUT``)."""
    return folder.parent.parent if folder.parent.name == "checkpoints" else folder
