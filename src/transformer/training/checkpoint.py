"""Checkpoints as training sees them: the trainer state that makes ``--resume`` exact, where to
resume from, and pruning old checkpoints; writing and reading a checkpoint is ``model_dir.py``'s.

The trainer state (optimizer, step, RNG and data-order state) makes ``--resume`` continue exactly.
"""

from __future__ import annotations

import logging
from pathlib import Path

import torch

from ..errors import UserError
from ..files import describe_os_error, remove_tree
from ..model_dir import (
    INDEX,
    TRAINER,
    WEIGHTS,
    index_pointers,
    read_index,
    read_weights,
    step_checkpoints,
)
from ..temporaries import clean_leftovers

log = logging.getLogger(__name__)


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
