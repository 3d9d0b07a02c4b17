"""Checkpoint averaging (Vaswani et al. §6.1: "averaging the last 5 checkpoints").

The average of the weights of the last N checkpoints usually translates a little better than
any single one of them, at no training cost.
"""

from __future__ import annotations

from pathlib import Path

import torch

from ..errors import UserError
from ..folder_kinds import folder_kind
from ..model_dir import WEIGHTS, load_checkpoint, read_weights, save_checkpoint, step_checkpoints
from .rundir import RunDir


def average_weights(folders: list[Path]) -> dict[str, torch.Tensor]:
    """Element-wise mean of the weights in ``folders`` (computed in float64)."""
    total: dict[str, torch.Tensor] = {}
    for folder in folders:
        state = read_weights(folder / WEIGHTS)
        if total and set(state) != set(total):
            raise UserError(f"{folder}: its weights do not match those of {folders[0]}")
        for name, tensor in state.items():
            total[name] = total.get(name, 0) + tensor.double()
    return {name: (t / len(folders)).float() for name, t in total.items()}


def average_last(model_dir: Path, last: int) -> Path:
    """Averages the newest ``last`` step checkpoints of a model directory into a new checkpoint
    ``checkpoints/average_last{N}`` and returns its folder. Only a training run is written
    into (``folder_kinds.folder_kind``): never an export, an import or a folder of the user's."""
    if folder_kind(model_dir) != "run":
        raise UserError(f"{model_dir} is not a training run: average reads its step checkpoints "
                        "and writes their average among them")  # fmt: skip
    checkpoints = RunDir(model_dir).checkpoints
    folders = step_checkpoints(checkpoints)
    if not folders:
        raise UserError(f"{model_dir} has no step checkpoints to average")
    if last < 1 or last > len(folders):
        raise UserError(f"--last {last}: {model_dir} has {len(folders)} step checkpoints")
    chosen = folders[-last:]
    loaded = load_checkpoint(chosen[-1])
    averaged = average_weights(chosen)
    with torch.no_grad():
        for name, param in loaded.model.named_parameters():
            param.copy_(averaged[name])
    return save_checkpoint(checkpoints, f"average_last{last}", loaded.model, loaded.config, None)
