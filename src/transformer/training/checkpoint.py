"""Checkpoints: written atomically, read defensively, so that a crash (even SIGKILL), a full disk
or a damaged file never costs more than the checkpoint being written.

The folder ``OUT/checkpoints/`` (its place in the model directory is ``rundir.py``'s business):

    index.json          {"last": "step_00001000", "best": "step_00000800"}
    step_00001000/      model.safetensors, config.json, trainer.pt

A checkpoint is serialized in memory, written to a hidden temporary folder, flushed to disk and
renamed into place; only then does ``index.json`` (replaced atomically) point to it. Reading is
forgiving where it can be and precise where it cannot: a missing or unreadable index falls back
to the newest complete checkpoint with a warning, and a damaged file is an error that names it.

The trainer state (optimizer, step, RNG and data-order state) makes ``--resume`` continue exactly.
"""

from __future__ import annotations

import io
import json
import logging
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load, save

from ..config import RunConfig
from ..config_files import build_config
from ..errors import UserError
from ..files import describe_os_error, fsync_dir, remove_tree, write_json_atomic
from ..model.transformer import Transformer

WEIGHTS = "model.safetensors"
CONFIG = "config.json"
CHECKPOINTS = "checkpoints"  # the folder of a model directory that holds them (RunDir)
TRAINER = "trainer.pt"
INDEX = "index.json"

log = logging.getLogger(__name__)


def model_state(model: Transformer) -> dict[str, torch.Tensor]:
    """The weights to save. ``named_parameters`` lists a tied tensor once, under its first name
    (safetensors refuses two names for one storage)."""
    return {name: p.detach().contiguous() for name, p in model.named_parameters()}


def _serialize(model: Transformer, config: RunConfig, trainer: dict | None) -> dict[str, bytes]:
    """The checkpoint's files as bytes, so that writing them is plain file I/O whose errors
    (a full disk above all) are OSErrors that say what happened."""
    weights = {name: tensor.cpu() for name, tensor in model_state(model).items()}  # any device
    files = {
        WEIGHTS: save(weights, metadata={"format": "pt"}),
        CONFIG: json.dumps(config.to_dict(), indent=2).encode(),
    }
    if trainer is not None:
        buffer = io.BytesIO()
        torch.save(trainer, buffer)
        files[TRAINER] = buffer.getvalue()
    return files


def save_checkpoint(
    checkpoints: Path, name: str, model: Transformer, config: RunConfig, trainer: dict | None
) -> Path:
    """Writes checkpoint ``name`` atomically and returns its folder (index.json is not touched).

    On any failure the temporary folder is removed and earlier checkpoints are untouched; an
    OSError (no space left on device, ...) becomes a UserError naming the folder.
    """
    files = _serialize(model, config, trainer)
    final, tmp = checkpoints / name, checkpoints / f".tmp-{name}"
    try:
        checkpoints.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        for file_name, data in files.items():
            with open(tmp / file_name, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
        if final.exists():  # re-saving the same step (e.g. after a resume): replace it
            remove_tree(final)
        os.rename(tmp, final)
        fsync_dir(checkpoints)
    except OSError as error:
        last = read_index(checkpoints).get("last")
        kept = f"the last checkpoint {checkpoints / last} is intact" if last else "none was saved"
        what = f"saving checkpoint {name} in {checkpoints}"
        raise UserError(f"{describe_os_error(error, what)}; {kept}") from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final


def index_pointers(checkpoints: Path) -> tuple[dict, str | None]:
    """The index's pointers, and why it could not be used (None when it was fine)."""
    path = checkpoints / INDEX
    if not path.exists():
        return {}, f"{path} is missing"
    try:
        index = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(index, dict):
            raise ValueError("not a JSON object")
    except (OSError, UnicodeDecodeError, ValueError) as error:
        return {}, f"{path} is unreadable ({error})"
    return index, None


def read_index(checkpoints: Path) -> dict:
    """The index's pointers ({"last": ..., "best": ...}); {} when missing or unreadable."""
    return index_pointers(checkpoints)[0]


def update_index(checkpoints: Path, **entries: object) -> dict:
    """Points ``last`` / ``best`` (and any other key) at checkpoint folders, atomically."""
    index = read_index(checkpoints)
    index.update(entries)
    write_json_atomic(checkpoints / INDEX, index)
    return index


def prune_checkpoints(checkpoints: Path, keep: int) -> None:
    """Deletes the oldest ``step_*`` folders beyond ``keep``, never the ones index.json names.

    A folder is renamed to ``.trash-*`` before it is deleted, so an interruption never leaves a
    half-deleted ``step_*`` folder; ``clean_checkpoints`` removes any such leftovers.
    """
    index = read_index(checkpoints)
    protected = {v for v in index.values() if isinstance(v, str)}
    steps = step_checkpoints(checkpoints)
    for old in steps[: max(len(steps) - keep, 0)]:
        if old.name not in protected:
            remove_tree(old)
    clean_checkpoints(checkpoints)


def clean_checkpoints(checkpoints: Path) -> list[str]:
    """Removes what an interrupted save or prune left behind; returns the names removed."""
    removed = []
    leftovers = [*checkpoints.glob(".tmp-*"), *checkpoints.glob(".trash-*")]
    # A step folder without its files can only come from a prune that an older version of this
    # code interrupted (it deleted in place).
    leftovers += [p for p in checkpoints.glob("step_*") if p.is_dir() and not _complete(p)]
    for path in leftovers:
        shutil.rmtree(path, ignore_errors=True)
        removed.append(path.name)
    return removed


def _complete(folder: Path) -> bool:
    return (folder / WEIGHTS).is_file() and (folder / CONFIG).is_file()


def step_checkpoints(checkpoints: Path) -> list[Path]:
    """The complete ``step_*`` checkpoint folders, oldest first."""
    return sorted(p for p in checkpoints.glob("step_*") if _complete(p))


@dataclass
class Loaded:
    """A model ready to use, with its config and the folder it came from."""

    model: Transformer
    config: RunConfig
    path: Path


def resolve_checkpoint(path: Path, which: str = "best") -> Path:
    """A checkpoint folder from a model directory (via index.json) or a checkpoint folder.

    Without a usable index (missing, unreadable, or pointing at a folder that is gone) the
    newest complete ``step_*`` folder is used, with a warning.
    """
    if (path / WEIGHTS).exists():
        return path
    if not path.exists():
        raise UserError(f"model directory not found: {path}")
    checkpoints = path / CHECKPOINTS
    index, problem = index_pointers(checkpoints)
    for key in (which, "last"):
        if key in index and _complete(checkpoints / str(index[key])):
            return checkpoints / index[key]
    steps = step_checkpoints(checkpoints)
    if steps:
        problem = problem or f"{checkpoints / INDEX} names no complete checkpoint"
        log.warning(f"{problem}; using the newest complete checkpoint, {steps[-1]}")
        return steps[-1]
    raise UserError(f"{path} holds no checkpoint (expected {checkpoints / INDEX} or {WEIGHTS})")


def read_config(folder: Path) -> RunConfig:
    """The RunConfig saved in a checkpoint folder."""
    path = folder / CONFIG
    try:
        values = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as error:
        raise UserError(f"cannot read {path}: {error}") from None
    return build_config(values, str(path))


def load_checkpoint(path: Path, which: str = "best", device: torch.device | str = "cpu") -> Loaded:
    """Loads a model (in eval mode) from a model directory or a checkpoint folder.

    The weights are read on the CPU and then moved to ``device`` (a map_location), so a
    checkpoint written on any device loads on any other.
    """
    folder = resolve_checkpoint(Path(path), which)
    config = read_config(folder)
    model = Transformer(config.model)
    load_weights(model, folder / WEIGHTS)
    return Loaded(model.to(device).eval(), config, folder)


def read_weights(path: Path) -> dict[str, torch.Tensor]:
    """The tensors of a safetensors file; a damaged or unreadable file is a UserError naming it."""
    try:
        return load(path.read_bytes())
    except FileNotFoundError:
        raise UserError(f"{path} is missing") from None
    except OSError as error:
        raise UserError(describe_os_error(error, f"reading {path}")) from None
    except SafetensorError as error:
        reason = str(error).rsplit(":", 1)[-1].strip()
        raise UserError(f"{path} is damaged ({reason}); it cannot be loaded") from None


def load_weights(model: Transformer, path: Path) -> None:
    """Copies safetensors weights into ``model``; names and shapes must match exactly."""
    state = read_weights(path)
    expected = model_state(model)
    if set(state) != set(expected):
        missing, unexpected = set(expected) - set(state), set(state) - set(expected)
        raise UserError(f"{path}: weights do not match the model (missing {sorted(missing)[:3]}, "
                        f"unexpected {sorted(unexpected)[:3]})")  # fmt: skip
    for name, tensor in expected.items():
        if state[name].shape != tensor.shape:
            raise UserError(f"{path}: {name} has shape {tuple(state[name].shape)}, the model "
                            f"{tuple(tensor.shape)}")  # fmt: skip
    with torch.no_grad():
        for name, param in model.named_parameters():
            param.copy_(state[name])


def load_trainer_state(folder: Path) -> dict:
    """The optimizer / step / RNG / data-order state saved next to the weights."""
    path = folder / TRAINER
    if not path.exists():
        raise UserError(f"{folder} has no trainer state ({TRAINER}); it cannot be resumed")
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except OSError as error:
        raise UserError(describe_os_error(error, f"reading {path}")) from None
    except Exception as error:  # torch raises EOFError, RuntimeError, UnpicklingError, ...
        raise UserError(
            f"{path} is damaged ({type(error).__name__}); it cannot be loaded"
        ) from None


def resume_candidates(checkpoints: Path) -> list[Path]:
    """Checkpoints to resume from, best first: the index's ``last``, then every complete
    ``step_*`` folder, newest first (with a warning when the index cannot be used)."""
    index, problem = index_pointers(checkpoints)
    steps = step_checkpoints(checkpoints)[::-1]
    last = checkpoints / str(index.get("last"))
    if last in steps:
        return [last] + [p for p in steps if p != last]
    if steps:
        problem = problem or f"{checkpoints / INDEX} names no complete checkpoint"
        log.warning(f"{problem}; resuming from the newest complete checkpoint, {steps[0]}")
    return steps


def model_dir_of(folder: Path) -> Path:
    """The model directory a checkpoint folder belongs to (``OUT/checkpoints/NAME`` -> ``OUT``)."""
    return folder.parent.parent if folder.parent.name == CHECKPOINTS else folder


def resume_point(checkpoints: Path) -> tuple[Path, dict] | None:
    """The newest checkpoint whose files all load, and its trainer state; damaged ones are
    skipped with a warning. None: the run has no checkpoint yet (it starts from step 0)."""
    candidates = resume_candidates(checkpoints) if checkpoints.exists() else []
    if not candidates:
        log.warning(f"{checkpoints.parent} has no checkpoint yet: starting again from step 0 "
                    "with its saved config")  # fmt: skip
        return None
    problems = []
    for folder in candidates:
        try:
            state = load_trainer_state(folder)
            read_weights(folder / WEIGHTS)
        except UserError as error:
            problems.append(str(error))
            log.warning(f"{error}; trying an older checkpoint")
            continue
        if problems:
            log.warning(f"resuming from {folder}, the newest intact checkpoint")
        return folder, state
    raise UserError(f"--resume: no checkpoint in {checkpoints} is intact: {problems[0]}")
