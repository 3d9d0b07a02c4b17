"""Checkpoints: writing one, finding and reading one, pruning, resuming from, and averaging them.

A checkpoint is a folder of ``checkpoints/`` (layout.py): the weights, the RunConfig and, for a
training run, the trainer state (optimizer, step, RNG and data-order state) that makes
``--resume`` continue exactly. It is serialized in memory, written to a hidden temporary
folder, flushed to disk and renamed into place; only then does ``index.json`` (replaced
atomically) point to it. Reading is forgiving where it can be and precise where it cannot: a
missing or unreadable index falls back to the newest complete checkpoint with a warning, and a
damaged file is an error that names it. Every write goes through the write gate (``files.py``),
naming the checkpoints folder as its owner.
"""

from __future__ import annotations

import io
import json
import logging
import random
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import save

from ..config import RunConfig, build_config
from ..errors import BadValue, UserError, describe_os_error
from ..files import built_aside, remove_tree, write_bytes, write_json_atomic
from ..model.base import EncoderDecoder
from ..model.build import build_model
from ..reading import entry_in, read_json
from ..temporaries import clean_leftovers
from .layout import (
    CHECKPOINTS,
    CONFIG,
    INDEX,
    TRAINER,
    WEIGHTS,
    WHICH,
    folder_kind,
    ignored_choice,
    is_checkpoint_folder,
)
from .settings import directory_settings
from .weights import load_weights, model_state, read_weights

log = logging.getLogger(__name__)


# ---------------------------------------------------------------------------------- writing
def _serialize(model: EncoderDecoder, config: RunConfig, trainer: dict | None) -> dict[str, bytes]:
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
    checkpoints: Path, name: str, model: EncoderDecoder, config: RunConfig, trainer: dict | None
) -> Path:
    """Writes checkpoint ``name`` atomically and returns its folder (index.json is not touched).

    On any failure the temporary folder is removed and earlier checkpoints are untouched; an
    OSError (no space left on device, ...) becomes a UserError naming the folder.
    """
    files = _serialize(model, config, trainer)
    try:
        checkpoints.mkdir(parents=True, exist_ok=True)
        # re-saving the same step (e.g. after a resume) replaces it
        with built_aside(checkpoints / name, owner=checkpoints) as folder:
            for file_name, data in files.items():
                write_bytes(folder / file_name, data, owner=folder)
    except OSError as error:
        last = read_index(checkpoints).get("last")
        kept = f"the last checkpoint {checkpoints / last} is intact" if last else "none was saved"
        what = f"saving checkpoint {name} in {checkpoints}"
        raise UserError(f"{describe_os_error(error, what)}; {kept}") from None
    return checkpoints / name


def prune_checkpoints(checkpoints: Path, keep: int) -> None:
    """Deletes the oldest ``step_*`` folders beyond ``keep``, never the ones index.json names.

    A folder is renamed to a hidden ``.NAME.transformer-trash-PID`` before it is deleted, so an
    interruption never leaves a half-deleted ``step_*`` folder; what an interrupted prune left
    aside is removed (``temporaries.clean_leftovers``).
    """
    index = read_index(checkpoints)
    protected = {v for v in index.values() if isinstance(v, str)}
    steps = step_checkpoints(checkpoints)
    for old in steps[: max(len(steps) - keep, 0)]:
        if old.name not in protected:
            remove_tree(old, owner=checkpoints)
    clean_leftovers(checkpoints)


# ------------------------------------------------------------------------------- the index
def index_pointers(checkpoints: Path) -> tuple[dict, str | None]:
    """The index's pointers, and why it could not be used (None when it was fine).

    A pointer is the name of a folder in ``checkpoints``: one that leaves it (an absolute path,
    ``..``, a link out of it: another model's checkpoint) is refused, never followed."""
    path = checkpoints / INDEX
    try:
        index = read_json(path)
    except UserError as error:  # missing, not JSON, too deep, too large: the caller falls back
        return {}, str(error)
    for key in ("last", "best"):
        if isinstance(index.get(key), str):
            entry_in(checkpoints, index[key], str(path), key)
    return index, None


def read_index(checkpoints: Path) -> dict:
    """The index's pointers ({"last": ..., "best": ...}); {} when missing or unreadable."""
    return index_pointers(checkpoints)[0]


def update_index(checkpoints: Path, **entries: object) -> dict:
    """Points ``last`` / ``best`` (and any other key) at checkpoint folders, atomically."""
    index = read_index(checkpoints)
    index.update(entries)
    write_json_atomic(checkpoints / INDEX, index, owner=checkpoints)
    return index


def step_checkpoints(checkpoints: Path) -> list[Path]:
    """The complete ``step_*`` checkpoint folders, oldest first."""
    return sorted(p for p in checkpoints.glob("step_*") if is_checkpoint_folder(p))


# -------------------------------------------------------------------------------- reading
@dataclass
class Loaded:
    """A model ready to use, with its config and the folder it came from."""

    model: EncoderDecoder
    config: RunConfig
    path: Path


def resolve_checkpoint(path: Path, which: str | None = None) -> Path:
    """A checkpoint folder from a model directory (via index.json, ``which`` of its checkpoints:
    best or last, None for best) or a checkpoint folder (itself: ``which`` must be None, as a
    given one would be ignored).

    Without a usable index (missing, unreadable, or pointing at a folder that is gone) the
    newest complete ``step_*`` folder is used, with a warning.
    """
    if which is not None and which not in WHICH:  # "first" quietly loaded the last
        raise BadValue(f"checkpoint {which!r}: choose one of {', '.join(WHICH)}")
    if (path / WEIGHTS).exists():
        if which is not None:  # "last" of one checkpoint quietly loaded that one
            raise BadValue(ignored_choice(f"checkpoint {which!r}", path, "one checkpoint already"))
        return path
    which = which or "best"
    if not path.exists():
        raise UserError(f"model directory not found: {path}")
    checkpoints = path / CHECKPOINTS
    index, problem = index_pointers(checkpoints)
    for key in (which, "last"):
        if isinstance(index.get(key), str) and is_checkpoint_folder(checkpoints / index[key]):
            return checkpoints / index[key]
    steps = step_checkpoints(checkpoints)
    if steps:
        problem = problem or f"{checkpoints / INDEX} names no complete checkpoint"
        log.warning(f"{problem}; using the newest complete checkpoint, {steps[-1]}")
        return steps[-1]
    raise UserError(f"{path} holds no checkpoint (expected {checkpoints / INDEX} or {WEIGHTS})")


def read_config(folder: Path) -> RunConfig:
    """The RunConfig saved in a checkpoint folder (or a model directory)."""
    path = folder / CONFIG
    return build_config(read_json(path), str(path))


def load_checkpoint(
    path: Path, which: str | None = None, device: torch.device | str = "cpu"
) -> Loaded:
    """Loads a model (in eval mode) from a model directory or a checkpoint folder, with the
    directory's own search settings (settings.py).

    The weights are read on the CPU and then moved to ``device`` (a map_location), so a
    checkpoint written on any device loads on any other.
    """
    folder = resolve_checkpoint(Path(path), which)
    config = directory_settings(Path(path), folder, read_config(folder))
    # the Transformer or the RNN, its weights not drawn at random: the file's replace them
    model = build_model(config.model, str(folder / CONFIG), initialise=False)
    load_weights(model, folder / WEIGHTS)
    return Loaded(model.to(device).eval(), config, folder)


# ------------------------------------------------------------------------------- resuming
def load_trainer_state(folder: Path) -> dict:
    """The optimizer / step / RNG / data-order state saved next to the weights."""
    path = folder / TRAINER
    if not path.exists():
        raise UserError(f"{folder} has no trainer state ({TRAINER}); it cannot be resumed")
    try:
        saved = torch.load(path, map_location="cpu", weights_only=True)
    except OSError as error:
        raise UserError(describe_os_error(error, f"reading {path}")) from None
    except Exception as error:  # torch raises EOFError, RuntimeError, UnpicklingError, ...
        raise UserError(
            f"{path} is damaged ({type(error).__name__}); it cannot be loaded"
        ) from None
    # A file that unpickles may still not be a trainer state; checked here, it is skipped like
    # an unreadable one (resume_point) rather than failing in the middle of the restore.
    problem = trainer_state_problem(saved)
    if problem:
        raise UserError(f"{path} is damaged ({problem}); it cannot be loaded")
    return saved


def _count(value: object, least: int = 0) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= least


def _number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _shown(value: object) -> str:
    """A value for a message: short, and never the text of a whole optimizer state."""
    scalar = (int, float, str, type(None))
    if isinstance(value, scalar) or (
        isinstance(value, dict | list)
        and len(value) <= 4
        and all(
            isinstance(v, scalar) for v in (value.values() if isinstance(value, dict) else value)
        )
    ):
        return repr(value)[:60]
    return f"a {type(value).__name__}"


def _rng_problem(rng: object) -> str | None:
    """What is wrong with a saved ``device.rng_state()``, tried on throwaway generators."""
    if not isinstance(rng, dict) or "python" not in rng or "torch" not in rng:
        return "not a dict with a 'python' and a 'torch' state"
    try:
        random.Random().setstate(rng["python"])
        torch.Generator().set_state(rng["torch"])
    except (TypeError, ValueError, OverflowError, RuntimeError) as error:
        return str(error).strip().splitlines()[0][:120] if str(error).strip() else "unusable"
    cuda = rng.get("cuda", [])
    if not isinstance(cuda, list | tuple) or not all(
        isinstance(t, torch.Tensor) and t.dtype == torch.uint8 for t in cuda
    ):
        return "its 'cuda' state is not a list of byte tensors"
    return None


def trainer_state_problem(saved: object) -> str | None:
    """What is wrong with the structure of a loaded ``trainer.pt`` (training/state.py writes
    it); None when it can be restored."""
    if not isinstance(saved, dict):
        return f"a {type(saved).__name__}, not a dict"
    missing = {"step", "position", "elapsed", "best_score", "best_valid_nll", "optimizer", "rng"}
    missing -= saved.keys()
    if missing:
        return f"no {', '.join(sorted(missing))}"
    position, optimizer = saved["position"], saved["optimizer"]
    checks = {
        "step": _count(saved["step"]),
        "position": isinstance(position, dict)
        and set(position) == {"epoch", "batch"}
        and all(_count(v) for v in position.values()),
        "elapsed": _number(saved["elapsed"]) and 0 <= saved["elapsed"] < float("inf"),
        "best_score": _number(saved["best_score"]),
        "best_valid_nll": _number(saved["best_valid_nll"]),
        "stale_validations": _count(saved.get("stale_validations", 0)),
        "world_size": _count(saved.get("world_size", 1), 1),
        "scaler": isinstance(saved.get("scaler", {}), dict),
        "optimizer": isinstance(optimizer, dict)
        and isinstance(optimizer.get("state"), dict)
        and isinstance(optimizer.get("param_groups"), list)
        and all(isinstance(g, dict) and "params" in g for g in optimizer["param_groups"]),
        "rng_ranks": isinstance(saved.get("rng_ranks", []), list),
    }
    bad = [key for key, fine in checks.items() if not fine]
    if bad:
        return f"its {bad[0]} is {_shown(saved.get(bad[0]))}"
    for where, rng in [("rng", saved["rng"])] + [
        (f"rng_ranks[{i}]", r) for i, r in enumerate(saved.get("rng_ranks", []))
    ]:
        problem = _rng_problem(rng)
        if problem:
            return f"its {where}: {problem}"
    return None


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


# ------------------------------------------------------------------------------ averaging
def average_weights(folders: list[Path], shapes: dict[str, torch.Size]) -> dict[str, torch.Tensor]:
    """Element-wise mean of the weights in ``folders`` (computed in float64), each of which must
    hold exactly the tensors ``shapes`` names, of those shapes (the model's: a tensor of another
    shape would be broadcast into the mean, or fail half-way)."""
    total: dict[str, torch.Tensor] = {}
    for folder in folders:
        state = read_weights(folder / WEIGHTS)
        if set(state) != set(shapes):
            raise UserError(f"{folder}: its weights do not match those of {folders[-1]}")
        for name, tensor in state.items():
            if tensor.shape != shapes[name]:
                raise UserError(
                    f"{folder / WEIGHTS}: {name} has shape {tuple(tensor.shape)}, "
                    f"the model {tuple(shapes[name])}: the checkpoint is damaged"
                )
            total[name] = total.get(name, 0) + tensor.double()
    return {name: (t / len(folders)).float() for name, t in total.items()}


def average_last(model_dir: Path, last: int) -> Path:
    """Averages the newest ``last`` step checkpoints of a training run (Vaswani et al. §6.1:
    "averaging the last 5 checkpoints") into a new checkpoint ``checkpoints/average_last{N}``
    and returns its folder. Only a training run is written into (its marker): never an
    export, an import or a folder of the user's."""
    if folder_kind(model_dir) != "run":
        raise UserError(f"{model_dir} is not a training run: average reads its step checkpoints "
                        "and writes their average among them")  # fmt: skip
    checkpoints = model_dir / CHECKPOINTS
    folders = step_checkpoints(checkpoints)
    if not folders:
        raise UserError(f"{model_dir} has no step checkpoints to average")
    if last < 1 or last > len(folders):
        raise UserError(f"--last {last}: give 1 to {len(folders)}, the step checkpoints "
                        f"{model_dir} has")  # fmt: skip
    chosen, out = folders[-last:], checkpoints / f"average_last{last}"
    # replaced whole, so only where it is an earlier average: its two files and nothing else
    if out.is_symlink() or (out.exists() and not out.is_dir()):
        raise UserError(f"{out} exists and is not a folder average made; nothing is replaced: "
                        "move it elsewhere")  # fmt: skip
    foreign = sorted({p.name for p in out.iterdir()} - {WEIGHTS, CONFIG}) if out.is_dir() else []
    if foreign:
        raise UserError(f"{out} holds {', '.join(foreign)}, which average did not make; nothing "
                        "in it is replaced: move them out of it")  # fmt: skip
    loaded = load_checkpoint(chosen[-1])
    averaged = average_weights(chosen, {k: v.shape for k, v in model_state(loaded.model).items()})
    with torch.no_grad():
        for name, param in loaded.model.named_parameters():
            param.copy_(averaged[name])
    config = directory_settings(model_dir, chosen[-1], loaded.config)  # the run's search
    return save_checkpoint(checkpoints, out.name, loaded.model, config, None)
